"""`fleet card retire ID --reason ...`: an operator marks a card gone by hand, and the journal says who and why.

A retired card leaves the run set at once and the pool for good: the decide job
never chooses it again nor counts it (`fleet.service.reconcile`). The command is
a real pool's: a simulation's cards are its preset's, so a simulation's store is
refused, as is an unknown card, a missing reason and a card retired already,
each in one line with exit status 2, nothing written.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from fleet.cli.words import DbOption, iso_minute, shown_url

if TYPE_CHECKING:
    from storage.interfaces import JournalStore, ReconcileStore


MAX_REASON_CHARS = 500
"""A retirement's reason is a sentence or two: `fleet status` and `fleet journal` print it whole."""

def _now() -> float:
    """The time a retirement takes effect: the wall clock, a real pool's service clock."""
    return time.time()


def retire_cmd(
    card: Annotated[str, typer.Argument(help="The card id, as its telemetry names it.")],
    reason: Annotated[Optional[str], typer.Option("--reason", help="Why it is gone (required; kept in the journal with who retired it).")] = None,
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: card, retired, by, reason.")] = False,
) -> None:
    """Mark a card gone by hand: out of the run set now and never added back or counted again.

    The journal records the retirement with the OS user who ran this and the reason (`fleet journal --kind retire`).
    Exit status: 0 retired; 2 an unknown card, no --reason, a card retired already, or a store that cannot take it
    (a simulation's, or none there); 1 the write failed."""
    from fleet.cli.output import UsageError
    from fleet.service.config import load_service_config
    from fleet.service.reconcile import operator
    from storage.cards import UnknownCard
    from storage.identity import StoreIdentity
    from storage.open import open_store

    if reason is None or not reason.strip():
        raise UsageError("fleet card retire: --reason is required: say why the card is gone (it is kept in the journal)")
    if len(reason.strip()) > MAX_REASON_CHARS:
        raise UsageError(f"fleet card retire: --reason is {len(reason.strip()):,} characters: at most {MAX_REASON_CHARS} "
                         "(it is printed by status and the journal)")
    url = load_service_config(None, {"storage": {"url": db} if db else {}}).storage.url
    store = open_store(url)  # a store that is not there is refused, never created
    try:
        store.identity.refuse_other(StoreIdentity.pool(), "an operator's retirement of a card")
        by = operator()
        now = int(_now())
        done = store.reconcile.retire_card(card, now, reason.strip(), by)
    except UnknownCard:
        raise UsageError(f"card {card!r}: not in the database {shown_url(url)!r}") from None
    finally:
        store.close()
    if not done:
        raise UsageError(f"card {card!r}: retired already (`fleet explain {card}` says when and why)")
    if as_json:
        typer.echo(json.dumps({"card": card, "retired": iso_minute(now), "by": by, "reason": reason.strip()}))
        return
    typer.echo(f"{card}: retired at {iso_minute(now)} by {by} ({reason.strip()}); it leaves the run set and is never added back")


def retired_lines(store: JournalStore, card: str | None = None, checks: ReconcileStore | None = None
                  ) -> tuple[list[dict], list[str]]:
    """Cards retired by hand (or the one given), for `fleet status` and `fleet explain`: as JSON and as lines.
    With `checks` (`Store.reconcile`) the records are read plainly, else through the journal's view."""
    from fleet.service.reconcile import retired_by_hand

    rows = retired_by_hand(store, None if checks is None else lambda kinds, since: checks.records_of_kinds(kinds, since))
    if card is not None:
        rows = {k: v for k, v in rows.items() if k == card}
    out = [{"card": k, "time": iso_minute(r.ts), "by": r.record.by, "reason": r.record.reason}
           for k, r in sorted(rows.items(), key=lambda kv: kv[1].ts)]
    lines = [f"{o['card']} was retired by hand at {o['time']} by {o['by']}: {o['reason']}" for o in out]
    return out, lines


def mismatch_lines(store) -> tuple[list[dict], list[str]]:
    """Reconcile mismatches open now (seen, not cleared): as JSON and as lines."""
    from fleet.service.reconcile import open_mismatches

    found = open_mismatches(store)
    out = [{"card": c, "kind": k, "since": iso_minute(r.ts), "reason": r.reason} for (c, k), r in sorted(found.items())]
    lines = [f"  {o['card']}: {o['reason']} (flagged {o['since']})" for o in out]
    if lines:
        lines.insert(0, f"journal and pool disagree ({len(out)}): `fleet journal --kind reconcile` for the history")
    return out, lines


def register(app: typer.Typer) -> None:
    card = typer.Typer(help="A card by hand: retire one that is gone.", no_args_is_help=True)
    card.command("retire")(retire_cmd)
    app.add_typer(card, name="card")
