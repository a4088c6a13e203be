"""What the `sluice serve` benchmarks share (bench/remote_loopback.py,
bench/remote_shared.py): the photo pipeline's spec, the data, starting a
worker on 127.0.0.1 and reading processes' CPU.

The pipeline is photos_bench.yaml's (decode, random_resized_crop 224, flip,
normalize, CHW, batch 128) with the source read by position (`shuffle:
true` on the source instead of a shuffle step: what `sluice serve` needs);
the u8 variant leaves out `normalize` (a trainer normalizes on its GPU),
so each image travels as 150 KB instead of 602 KB."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SLUICE_BIN = os.environ.get("SLUICE_BIN",
                            os.path.join(HERE, "..", "build", "bin", "sluice"))

SPEC = """
pipeline: remote_bench_{name}
seed: 42
source:
  image_folder: {{root: {root}, extensions: [jpg], shuffle: true}}
steps:
  - decode_image: {{field: data, as: image, channels: 3}}
  - random_resized_crop: {{field: image, size: [224, 224], scale: [0.08, 1.0], ratio: [0.75, 1.3333]}}
  - random_flip: {{field: image, axis: width, p: 0.5}}
{normalize}  - transpose: {{field: image, to: CHW}}
  - select: [image, label]
  - batch: {{size: 128, drop_remainder: true}}
epochs: 1
budget: {{cores: all, memory: 2GiB}}
"""
NORMALIZE = ("  - normalize: {field: image, mean: [123.675, 116.28, 103.53], "
             "std: [58.395, 57.12, 57.375]}\n")


def photos_root(data):
    """bench/gen_photos.py's photographs under `data`, made when missing."""
    root = os.path.join(data, "photos", "train")
    if not os.path.isdir(root):
        subprocess.check_call([sys.executable,
                               os.path.join(HERE, "gen_photos.py"),
                               "--out", data])
    return root


def write_spec(tmp, name, root, f32):
    """The pipeline's spec in `tmp`: f32 (normalized) or u8 outputs."""
    spec = os.path.join(tmp, name + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(name=name, root=root,
                            normalize=NORMALIZE if f32 else ""))
    return spec


def _stat(pid):
    """The fields of /proc/PID/stat after the command's name (field 3 on)."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_of(pid):
    """User + system seconds of a process (and its threads)."""
    fields = _stat(pid)
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def faults_of(pid):
    """Minor page faults of a process (and its threads) so far: on this VM
    each costs ~20-30 us, so fresh pages are a cost of their own."""
    return int(_stat(pid)[7])


def start_worker(spec, threads, tmp, env=None, extra=()):
    """`sluice serve SPEC` on a free 127.0.0.1 port: (process, address)."""
    port_file = os.path.join(tmp, "port-%d" % time.monotonic_ns())
    p = subprocess.Popen([SLUICE_BIN, "serve", spec, "--listen",
                          "127.0.0.1:0", "--port-file", port_file,
                          "--threads", str(threads), "-q", *extra],
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})))
    while not os.path.exists(port_file):
        if p.poll() is not None:
            sys.exit("sluice serve failed: " + p.stderr.read())
        time.sleep(0.05)
    with open(port_file) as f:
        return p, f.read().strip()


def stop_worker(p):
    p.terminate()
    p.wait()
