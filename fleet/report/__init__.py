"""Output for people and notebooks: the verdict on a terminal, the export folder, the compare plot."""
