"""Make the top-level module ``pyspark_txkafka`` visible to ``pkgutil.iter_modules()`` in an
editable install.

Spark finds Python data sources by scanning ``iter_modules()`` for ``pyspark_*`` modules. A wheel
install puts ``pyspark_txkafka.py`` in site-packages, where the scan sees it; an editable install
(needed here because the package maps top-level folders to ``txkafka.*``) serves it through an import
hook that the scan cannot see. A one-entry path directory with a link to the real file fixes that
without exposing anything else.
"""

import os
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

# Installs before the pyspark import hook became opt-in copied it here unasked; such a copy (and only
# such a copy: `txkafka pyspark-bytecode enable` writes another line) is removed.
ALWAYS_ON = ("import sys; any(isinstance(p, str) and p.endswith('pyspark.zip') for p in sys.path) "
             "and __import__('txkafka.installed_pyspark', fromlist=['_']).prefer_installed_pyspark()\n")
old = os.path.join(site.getsitepackages()[0], "txkafka-installed-pyspark.pth")
if os.path.isfile(old) and open(old).read() == ALWAYS_ON:
    os.unlink(old)
    print(f"removed {old}: the pyspark import hook is opt-in (txkafka pyspark-bytecode enable)")
