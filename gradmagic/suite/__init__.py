"""`pytest --gradmagic`: a project's existing tests run under one watch, and every custom-gradient op they reach is
checked at the inputs they fed it (`plugin.py`, the pytest plugin, registered through the `pytest11` entry point;
`settings.py`, what it is told; `session.py`, the watch over the session; `results.py`, what is made of its report).
"""
