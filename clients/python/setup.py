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


def runtime_requirements():
    """The runtime packages, each at least the version the stubs just generated need.

    grpcio-tools stamps the stubs with its own version and they refuse to import under an older
    grpcio ("depends on grpcio>=X"), and the messages check protobuf's runtime the same way: so the
    package requires what its build used, and pip upgrades an older grpcio or protobuf on install.
    Found when grpcio-tools 1.85.4 built the stubs into a virtualenv holding grpcio 1.85.3.
    """
    from importlib.metadata import version

    grpc = version("grpcio-tools")
    protobuf = "4.25"
    pb2 = os.path.join(HERE, "solus_client", "_pb", "deduper_pb2.py")
    with open(pb2) as f:
        found = re.search(r"ValidateProtobufRuntimeVersion\(\s*[\w.]+,\s*(\d+),\s*(\d+),\s*(\d+),", f.read())
    if found:
        protobuf = ".".join(found.groups())
    return [f"grpcio>={grpc}", f"protobuf>={protobuf}", "grpcio-status>=1.60", "googleapis-common-protos>=1.60"]


# setuptools lists the packages before any command runs, so the stubs are made right away.
generate()

setup(cmdclass={"build_py": BuildPy, "sdist": SDist}, install_requires=runtime_requirements())
