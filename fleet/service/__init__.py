"""`fleet serve`: the autoscaler beside a real pool, its jobs around the core's hour-step, its journal, actuators and metrics."""
