"""Mechanics the feature packages share: none of them owns these, all of them use them.

* :mod:`.serving`: serve an ASGI app on a loopback port from a thread (task apps, the served
  fake, the stub model, the tests' own servers);
* :mod:`.loopback`: is an address loopback, and which one to bind;
* :mod:`.tls`: one verifying SSL context per process;
* :mod:`.files`: per-test file names and atomic writes;
* :mod:`.asgi`: the raw ASGI chores of the plugin's framework-free servers;
* :mod:`.callers`: the user's line a call into the package came from (where warnings point).

Nothing is imported here, so importing one helper never pays for another (uvicorn, ssl).
"""
