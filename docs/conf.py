"""Sphinx configuration of the mxhorovod documentation.

Build: ``python -m sphinx -W -b html docs docs/_build/html`` from a checkout with the package
installed (the ``[docs]`` extra), editable or not. Importing mxhorovod needs MXNet but not
MPI: nothing here calls ``init()``.
"""
import glob
import importlib.util
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# The checkout's package when its extension is built in place (an editable install, the
# tests, developers); else the installed one. ``python -m sphinx`` run from the checkout
# puts the checkout first on sys.path, whose mxhorovod/ then has no extension: it is taken
# off, so autodoc imports the installed package (and mxhorovodrun from the same place).
if glob.glob(os.path.join(ROOT, "mxhorovod", "_core*.so")):
    sys.path.insert(0, ROOT)
else:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != ROOT]
    if importlib.util.find_spec("mxhorovod") is None:
        raise RuntimeError("the API reference is generated from the installed mxhorovod: "
                           "install it first (pip install '.[docs]' in the checkout)")

project = "mxhorovod"
author = "the mxhorovod authors"
copyright = "the mxhorovod authors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# "--flag" must stay two hyphens, not become an en dash.
smartquotes = False
# Blocks without a language (the generated usage line) are plain text.
highlight_language = "none"
exclude_patterns = ["_build"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False


html_theme = "furo"
html_title = "mxhorovod"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
