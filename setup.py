"""Everything is declared in pyproject.toml; this adds the one file a declaration cannot place.

``txkafka-installed-pyspark.pth`` must sit at the top of site-packages, where Python's ``site``
runs it at interpreter start (see txkafka/installed_pyspark.py for why). A wheel puts what its
build directory holds at that top, so the file is copied there after the packages are built.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "txkafka-installed-pyspark.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):  # editable: .ci/editable_toplevel.py
            self.copy_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), PTH),
                           os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return outputs + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
