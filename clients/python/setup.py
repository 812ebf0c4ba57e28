"""Generates solus_client/_pb from the repository's proto/ with grpcio-tools at build time.

Nothing generated is checked in. The proto files are looked up in ../../proto (a checkout
of the Solus repository) or ./proto (an sdist, which carries a copy).
"""
import os
import re
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_FILE = os.path.join("solus", "v1", "deduper.proto")


def proto_root():
    for root in (os.path.join(HERE, "..", "..", "proto"), os.path.join(HERE, "proto")):
        if os.path.exists(os.path.join(root, PROTO_FILE)):
            return os.path.normpath(root)
    raise RuntimeError("solus-client: proto/solus/v1/deduper.proto not found in ../../proto or ./proto")


def generate():
    from grpc_tools import protoc
    import grpc_tools

    out = os.path.join(HERE, "solus_client", "_pb")
    os.makedirs(out, exist_ok=True)
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["grpc_tools.protoc", f"-I{proto_root()}", f"-I{include}",
            f"--python_out={out}", f"--grpc_python_out={out}", PROTO_FILE]
    if protoc.main(args) != 0:
        raise RuntimeError("solus-client: protoc failed on " + PROTO_FILE)
    gen = os.path.join(out, "solus", "v1")
    for name in ("deduper_pb2.py", "deduper_pb2_grpc.py"):
        src = os.path.join(gen, name)
        with open(src) as f:
            text = f.read()
        # The stubs import each other as `solus.v1`: make it relative to the package.
        text = re.sub(r"^from solus\.v1 import", "from . import", text, flags=re.M)
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    shutil.rmtree(os.path.join(out, "solus"))
    with open(os.path.join(out, "__init__.py"), "w") as f:
        f.write('"""Stubs generated from proto/solus/v1/deduper.proto at build time."""\n')


class BuildPy(build_py):
    def run(self):
        generate()
        super().run()


class SDist(sdist):
    def run(self):
        dst = os.path.join(HERE, "proto", "solus", "v1")
        os.makedirs(dst, exist_ok=True)
        shutil.copy(os.path.join(proto_root(), PROTO_FILE), dst)
        super().run()


# setuptools lists the packages before any command runs, so the stubs are made right away.
generate()

setup(cmdclass={"build_py": BuildPy, "sdist": SDist})
