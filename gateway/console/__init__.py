"""The operator console under ``/console``: read-only pages of why each request went where it went.

``mount.py`` mounts it (the login, the static files, every page behind the admin-key gate of
``access.py``); ``views.py`` renders the Jinja2 templates of ``templates/``; ``pages/`` holds the pages
(``pages.PAGES``: the navigation). The records the pages read are gateway.records'.
Contracts: docs/contracts.md#console; how to run it: docs/operations.md#console.
"""
