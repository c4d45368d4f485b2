"""The pytest wiring: hooks, options, markers, fixtures, run state and live progress."""
