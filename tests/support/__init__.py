"""Test support code shared by the test modules (not tests themselves).

``tests/`` is not a package: pytest puts ``tests/`` on ``sys.path`` (rootdir-relative
``prepend`` import mode, as for ``conftest.py``), so test modules import these helpers as
``support.<module>``.
"""
