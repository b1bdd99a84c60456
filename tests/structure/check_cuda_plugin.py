#!/usr/bin/env python3
"""The CUDA backend is a plugin (issue 41): the built `precon` and `precon-train` link no CUDA
library (ldd names no libcudart, libcublas, libcusolver or libnccl), `precon-train --version`
names the plugin it would load (or says the backend is not built), an installed layout finds it
at <bin>/../<libdir>, a CPU run never opens it, and a CUDA run whose plugin cannot be loaded exits
2 naming the path and the loader's reason.

Usage: check_cuda_plugin.py --precon P --precon-train T --source-dir S [--plugin SO --libdir-rel ../lib]"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None
CUDA_LIBS = ("libcudart", "libcublas", "libcusolver", "libnccl")

CONFIG = """
[model]
n_layer = 1
n_head = 2
d_model = 32
seq_len = 32
vocab_size = 256

[data]
train = "{data}/train.bin"
val = "{data}/val.bin"

[train]
steps = 1
batch_size = 2
eval_every = 0
eval_batches = 1
checkpoint_every = 0
device = "{device}"
threads = 1

[optimizer]
name = "adamw"
warmup_steps = 1
"""


def run(cmd, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.pop("PRECON_CUDA_PLUGIN", None)
    env.update(env_extra or {})
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


class CudaPlugin(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="precon_plugin_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def config(self, device):
        path = os.path.join(self.tmp, device + ".toml")
        with open(path, "w") as f:
            f.write(CONFIG.format(data=os.path.join(ARGS.source_dir, "data", "sotu"), device=device))
        return path

    def train(self, device, env_extra=None):
        run_dir = os.path.join(self.tmp, "run-" + device)
        return run([ARGS.precon_train, "--config", self.config(device), "--run-dir", run_dir], env_extra)

    def test_programs_link_no_cuda_library(self):
        for program in (ARGS.precon, ARGS.precon_train):
            out = run(["ldd", program]).stdout
            linked = [line.strip() for line in out.splitlines() if line.strip().startswith(CUDA_LIBS)]
            self.assertEqual(linked, [], "%s links CUDA libraries: %s" % (program, linked))

    def test_version_names_the_backends(self):
        out = run([ARGS.precon_train, "--version"]).stdout
        if ARGS.plugin:
            self.assertIn("backends: cpu, cuda (plugin %s)" % ARGS.plugin, out)
        else:
            self.assertIn("backends: cpu, cuda: not built", out)

    def test_installed_layout_finds_the_plugin(self):
        if not ARGS.plugin:
            self.skipTest("no CUDA backend in this build")
        bin_dir = os.path.join(self.tmp, "bin")
        lib_dir = os.path.normpath(os.path.join(bin_dir, ARGS.libdir_rel))
        os.makedirs(bin_dir)
        os.makedirs(lib_dir, exist_ok=True)
        shutil.copy(ARGS.precon_train, bin_dir)
        shutil.copy(ARGS.plugin, lib_dir)
        out = run([os.path.join(bin_dir, "precon-train"), "--version"]).stdout
        self.assertIn("cuda (plugin %s)" % os.path.join(lib_dir, "libprecon_cuda.so"), out)

    def test_cpu_run_does_not_open_the_plugin(self):
        # A plugin path that cannot load: a CPU run that tried would fail.
        r = self.train("cpu", {"PRECON_CUDA_PLUGIN": os.path.join(self.tmp, "missing", "libprecon_cuda.so")})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unloadable_plugin_is_a_usage_error(self):
        if not ARGS.plugin:
            self.skipTest("no CUDA backend in this build")
        missing = os.path.join(self.tmp, "missing", "libprecon_cuda.so")
        r = self.train("cuda", {"PRECON_CUDA_PLUGIN": missing})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot load the CUDA backend plugin " + missing, r.stderr)
        self.assertIn("No such file", r.stderr)
        not_elf = os.path.join(self.tmp, "libnot_elf.so")
        with open(not_elf, "w") as f:
            f.write("not a shared object\n" * 200)
        r = self.train("cuda", {"PRECON_CUDA_PLUGIN": not_elf})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot load the CUDA backend plugin " + not_elf, r.stderr)
        self.assertIn("invalid ELF header", r.stderr)  # dlerror()'s words


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--precon", required=True)
    p.add_argument("--precon-train", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--plugin", default="")
    p.add_argument("--libdir-rel", default="../lib")
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
