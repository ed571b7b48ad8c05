"""Make the top-level module ``pyspark_txkafka`` visible to ``pkgutil.iter_modules()`` in an
editable install.

Spark finds Python data sources by scanning ``iter_modules()`` for ``pyspark_*`` modules. A wheel
install puts ``pyspark_txkafka.py`` in site-packages, where the scan sees it; an editable install
(needed here because the package maps top-level folders to ``txkafka.*``) serves it through an import
hook that the scan cannot see. A one-entry path directory with a link to the real file fixes that
without exposing anything else.

An editable install also lacks the ``txkafka-installed-pyspark.pth`` a wheel puts at the top of
site-packages (setup.py; why in txkafka/installed_pyspark.py), so this copies it there.
"""

import os
import shutil
import site
import sys

venv = sys.prefix
shim = os.path.join(venv, "txkafka-toplevel")
os.makedirs(shim, exist_ok=True)
target = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "pyspark_txkafka.py"))
link = os.path.join(shim, "pyspark_txkafka.py")
if os.path.lexists(link):
    os.unlink(link)
os.symlink(target, link)
with open(os.path.join(site.getsitepackages()[0], "txkafka-toplevel.pth"), "w") as fh:
    fh.write(shim + "\n")
print(f"pyspark_txkafka visible to Spark's data source scan via {shim}")

repo = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
pth = "txkafka-installed-pyspark.pth"
shutil.copyfile(os.path.join(repo, pth), os.path.join(site.getsitepackages()[0], pth))
print(f"{pth} installed: Spark's Python processes import pyspark with its bytecode")
