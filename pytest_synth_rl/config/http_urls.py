"""Where :func:`~pytest_synth_rl.config.urls.http_url_problem` was first defined; it lives in ``urls``."""

from pytest_synth_rl.config.urls import http_url_problem

__all__ = ["http_url_problem"]
