#!/usr/bin/python3
"""Remote sources under injected latency, against the same pipeline on local
files: image_folder over s3:// and webdataset shards over http://, every
request answered DELAY ms late, with the requests in flight swept and as
`sluice tune` chooses them (Little's law).

Both decode real photographs (bench/gen_photos.py):
  decode_image -> random_resized_crop 224 -> select -> batch 64, --sink null.

For each configuration it runs `--repeats` times, interleaved with the
others (a burst of load from other processes then spreads over all of
them), and reports the median records/s, the ratio to local files,
sluice's CPU seconds per record (getrusage of the child), and the CPU the
servers and the proxies spent per record meanwhile (/proc of the bench's
long-lived children): on a 2-core host they share the cores with the
decoding, so local rate x C_local / (C + S) bounds what a remote run can
reach, whatever the latency hiding.

Usage: remote_latency.py [--images N] [--delay-ms MS] [--sweep 1,2,4,...]
                         [--repeats R] [--epochs E] [--sluice PATH]
                         [--data DIR] [--servers nginx|proxy] [--tunes T]
                         [--only image_folder|webdataset] [--pin]
                         [--serve-only] [--floor] [--tls]
                         [--peer] [--peer-workers 0,2] [--peer-threads 64]

--pin runs the servers (and the bench itself) on CPU 1 and every `sluice
run` and `sluice tune` (local and remote alike) on CPU 0 with one core
(`budget: {cores: 1}` and `--threads 1`), so that the ratio
to local files measures the client's own cost rather than the servers'
share of the pipeline's cores (a real object store's CPU is elsewhere).
Without it everything shares every core, as before.

Besides records/s the tables count, per record of the `sluice run` child
(getrusage): CPU ms, minor page faults, context switches (voluntary +
involuntary), and from its --stats-json the requests and the body bytes
received (0 for local files).

--floor adds a table of the client's cost alone: each pipeline read
without decoding (10 epochs) from local files and from its server, and
bench/http_floor.c (compiled with the host's cc), a minimal keep-alive
client getting the same objects: what any client pays per request here.

--tls has the nginx endpoints answer over TLS (the tests' servers' CA,
named by each spec's remote.ca_bundle), as object stores do; the local
files are read as before. Not with --floor (bench/http_floor.c speaks
plain HTTP).

--peer adds rows for the PyTorch peer (bench/peers/torch_s3.py) on
image_folder's pipeline: a DataLoader whose dataset gets each batch's
objects with boto3 (--peer-threads GETs in flight per worker) and decodes
them with PIL, for each of --peer-workers, from local files and from the
s3:// endpoint, interleaved with sluice's runs (with --pin on CPU 0 too).

--serve-only starts the servers, writes the specs and prints the commands
that run them (with the environment they need), then waits for Enter:
for `perf record` and other tools on the same specs.

`sluice tune` runs --tunes times per pipeline (each profiles afresh:
SLUICE_NO_SCHEDULE_CACHE=1), and each schedule it writes is run --repeats
times: the table shows every choice and its rate against the sweep's best.

By default each endpoint is an nginx that waits the latency before it
answers (remote_servers.py, nginx_with_latency, with sendfile and an
open-file cache, as a file server runs): the s3:// runs list through
s3rver and nginx answers their object GETs from s3rver's files. With
--servers proxy the Python delay proxy sits in front of s3rver and nginx,
whose CPU per picture (s3rver's GETs cost more than the decoding) comes out
of the two cores the pipeline uses.
Prints Markdown tables.
"""
import argparse
import io
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import remote_servers  # noqa: E402

STEPS = """steps:
  - decode_image: {field: data, as: image, channels: 3}
  - random_resized_crop: {field: image, size: [224, 224]}
  - select: [image, label]
  - batch: {size: 64}
epochs: %d
budget: {cores: %d, memory: 1GiB}
"""


def servers_cpu():
    """CPU seconds the bench's long-lived children (the servers, the
    proxies, s3rver's log drain) have used so far, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    me, total = str(os.getpid()), 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the name: state, ppid, ..., utime (14th field), stime.
        if fields[1] == me:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def pin_children(cpu):
    """Every thread of the bench's children (the servers, the proxies,
    s3rver's log drain) and of the bench itself onto `cpu`."""
    me = str(os.getpid())
    pids = [me]
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[1] == me:
                    pids.append(pid)
        except OSError:
            continue
    for pid in pids:
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), {cpu})
            except OSError:
                pass


def run(sluice, args, env, pin=False, stats=None):
    """{records, rate, cpu, servers, faults, switches, requests, bytes} of
    `sluice run ARGS --sink null` (the counts over the whole run); with
    `pin` the run is on CPU 0 at one thread."""
    srv_before = servers_cpu()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    extra = ["--threads", "1"] if pin else []
    if stats:
        extra += ["--stats-json", stats]
    r = subprocess.run(
        [sluice, "run"] + args + ["--sink", "null"] + extra,
        capture_output=True, text=True, env=env,
        preexec_fn=(lambda: os.sched_setaffinity(0, {0})) if pin else None)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        sys.exit("sluice failed on %s:\n%s" % (args, out))
    m = re.search(r"\((\d+) records, ([\d.]+)(k?) records/s", out)
    rate = float(m.group(2)) * (1000 if m.group(3) else 1)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime -
                                                 before.ru_stime)
    remote = {}
    if stats:
        with open(stats) as f:
            remote = json.load(f).get("remote", {})
    return {"records": int(m.group(1)), "rate": rate, "cpu": cpu,
            "servers": servers_cpu() - srv_before,
            "faults": after.ru_minflt - before.ru_minflt,
            "switches": (after.ru_nvcsw - before.ru_nvcsw) +
                        (after.ru_nivcsw - before.ru_nivcsw),
            "requests": remote.get("requests", 0),
            "bytes": remote.get("bytes", 0)}


PEER = os.path.join(HERE, "peers", "torch_s3.py")


def peer_run(args, env, pin=False):
    """The same counts as run() for bench/peers/torch_s3.py ARGS (the
    PyTorch DataLoader reading with boto3, or local files): its records/s
    over the whole run (listing and worker start-up included, as sluice's
    own time includes its listing), its and its workers' CPU from then on
    (torch's import left out)."""
    srv_before = servers_cpu()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(
        ["/usr/bin/python3", PEER] + args, capture_output=True, text=True,
        env=env,
        preexec_fn=(lambda: os.sched_setaffinity(0, {0})) if pin else None)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit("the torch peer failed on %s:\n%s" % (args,
                                                        r.stdout + r.stderr))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {"records": out["records"], "rate": out["rate"],
            "cpu": out["cpu"],
            "servers": servers_cpu() - srv_before,
            "faults": after.ru_minflt - before.ru_minflt,
            "switches": (after.ru_nvcsw - before.ru_nvcsw) +
                        (after.ru_nivcsw - before.ru_nivcsw),
            "requests": 0 if "--local" in args else out["records"],
            "bytes": 0}


def tune(sluice, spec, report, env, pin=False):
    """`sluice tune`: the schedule file and the requests in flight chosen,
    from a profile of its own (no schedule cache)."""
    r = subprocess.run(
        [sluice, "tune", spec, "--report", report],
        capture_output=True, text=True,
        env=dict(env, SLUICE_NO_SCHEDULE_CACHE="1"),
        preexec_fn=(lambda: os.sched_setaffinity(0, {0})) if pin else None)
    if r.returncode != 0:
        sys.exit("sluice tune failed on %s:\n%s" % (spec, r.stdout + r.stderr))
    md = open(os.path.join(report, "report.md")).read()
    m = re.search(r"source: (\d+) requests in flight, (\d+) ms median "
                  r"latency", md)
    if not m:
        sys.exit("the tune report names no requests in flight:\n" + md)
    return (os.path.join(report, "schedule.yaml"), int(m.group(1)),
            int(m.group(2)))


FLOOR_EPOCHS = 10
FLOOR_IN_FLIGHT = 8


def floor(args, work, pipelines, results, env, s3, http, keys, nshards):
    """The client's cost per record with nothing else to do: each pipeline
    read only (its records selected, no decoding) from local files and from
    its server at FLOOR_IN_FLIGHT requests in flight, and bench/
    http_floor.c's plain GETs of the same objects over as many keep-alive
    connections (pinned like the runs with --pin). From the decoding
    pipeline's local CPU per record (the tables above) and these, the
    ratio to local files a client at the floor would reach."""
    exe = os.path.join(work, "http_floor")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc or subprocess.run(
            [cc, "-O2", "-o", exe, os.path.join(HERE, "http_floor.c")],
            capture_output=True).returncode != 0:
        print("(--floor: no C compiler could build bench/http_floor.c)")
        return
    read_only = ("steps:\n  - select: [data, label]\nepochs: %d\n"
                 "budget: {cores: %d, memory: 1GiB}\n"
                 % (FLOOR_EPOCHS, 1 if args.pin else 2))

    def spec_of(name, source):
        out = os.path.join(work, "floor_%s.yaml" % name)
        with open(out, "w") as f:
            f.write("pipeline: floor_%s\nseed: 1\nsource:\n  %s\n%s"
                    % (name, source, read_only))
        return out

    targets = {
        "image_folder over s3://": (
            s3, ["/%s/%s" % (remote_servers.BUCKET, k) for k in keys]),
        "webdataset over http://": (
            http, ["/shards/s-%04d.tar" % i for i in range(nshards)]),
    }
    pin = (lambda: os.sched_setaffinity(0, {0})) if args.pin else None
    print("### The client's cost per record, read only\n")
    print("%d epochs, no decoding, %d requests in flight (connections for "
          "the minimal client); CPU microseconds per record, median of %d "
          "runs. \"At the floor\": the decoding pipeline's local CPU per "
          "record D (tables above) against D + (minimal client - local "
          "read), the ratio to local files a client that cost no more "
          "than the minimal one would reach.\n"
          % (FLOOR_EPOCHS, FLOOR_IN_FLIGHT, args.repeats))
    print("| pipeline | local read | sluice remote | minimal client "
          "(http_floor) | sluice's client above the minimal | D | at the "
          "floor | sluice now (read only) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (local, remote) in pipelines.items():
        text = open(local).read()
        lspec = spec_of(name[:3] + "_local",
                        text.split("source:\n  ", 1)[1].split("\n", 1)[0])
        rspec = spec_of(name[:3] + "_remote", remote(FLOOR_IN_FLIGHT))
        base, paths = targets[name]
        port = base.rsplit(":", 1)[1]
        count = (len(keys) if name.startswith("image") else nshards) \
            * FLOOR_EPOCHS
        records = len(keys) * FLOOR_EPOCHS
        lrun, rrun, frun = [], [], []
        for _ in range(args.repeats):
            lrun.append(run(args.sluice, [lspec], env, args.pin))
            rrun.append(run(args.sluice, [rspec], env, args.pin))
            r = subprocess.run([exe, port, str(FLOOR_IN_FLIGHT), str(count)],
                               input="\n".join(paths), capture_output=True,
                               text=True, preexec_fn=pin)
            if r.returncode != 0:
                sys.exit("http_floor failed: " + r.stdout + r.stderr)
            m = re.search(r"user ([\d.]+) s, system ([\d.]+) s", r.stdout)
            frun.append((float(m.group(1)) + float(m.group(2))) / records)
        lo = statistics.median(x["cpu"] / x["records"] for x in lrun) * 1e6
        re_ = statistics.median(x["cpu"] / x["records"] for x in rrun) * 1e6
        fl = statistics.median(frun) * 1e6
        d = statistics.median(x["cpu"] / x["records"]
                              for x in results[(name, "local")]) * 1e6
        print("| %s | %.1f | %.1f | %.1f | %.1f | %.0f | %.2f× | %.2f× |"
              % (name, lo, re_, fl, re_ - fl, d, d / (d + max(0, fl - lo)),
                 d / (d + max(0, re_ - lo))))
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=600)
    ap.add_argument("--delay-ms", type=float, default=20)
    ap.add_argument("--sweep", default="2,4,8,16,32")
    ap.add_argument("--only", choices=["image_folder", "webdataset"],
                    help="run one of the two pipelines (their sweeps differ: "
                         "image_folder needs more requests in flight)")
    ap.add_argument("--tunes", type=int, default=3,
                    help="`sluice tune` runs per pipeline, each run as its "
                         "own configuration")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin",
                                                     "sluice"))
    ap.add_argument("--data", default=None)
    ap.add_argument("--servers", choices=["nginx", "proxy"],
                    default="nginx",
                    help="nginx: one nginx per endpoint waits the latency "
                         "(echo_sleep) and answers the GETs itself (S3 "
                         "listings by s3rver); proxy: the Python delay "
                         "proxy in front of s3rver and nginx (0.2-2 ms of "
                         "server CPU per picture on the pipeline's cores)")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="copy every tune's report (schedule.yaml, "
                         "report.md, report.json) into DIR/tune_<pipeline>_<k> "
                         "before the work directory is removed, to see the "
                         "knobs besides the requests in flight")
    ap.add_argument("--pin", action="store_true",
                    help="servers and the bench on CPU 1, each sluice run "
                         "on CPU 0 at --threads 1 (needs 2 CPUs)")
    ap.add_argument("--floor", action="store_true",
                    help="also measure each pipeline's client cost per "
                         "record without decoding (read only, 10 epochs) "
                         "against local files and against bench/"
                         "http_floor.c, a minimal keep-alive client (needs "
                         "cc): what any client pays per request here")
    ap.add_argument("--tls", action="store_true",
                    help="the nginx endpoints answer over TLS (https://, "
                         "a certificate from the fixture's own CA, named "
                         "by remote.ca_bundle), as object stores do")
    ap.add_argument("--peer", action="store_true",
                    help="also run the PyTorch peer (bench/peers/torch_s3.py: "
                         "DataLoader, boto3, PIL) on image_folder's objects, "
                         "from local files and from the s3:// endpoint")
    ap.add_argument("--peer-workers", default="0,2",
                    help="the peer's DataLoader num_workers values")
    ap.add_argument("--peer-threads", type=int, default=64,
                    help="the peer's GETs in flight per worker")
    ap.add_argument("--serve-only", action="store_true",
                    help="start the servers, write the specs, print the "
                         "commands and wait for Enter (for perf)")
    args = ap.parse_args()
    if args.tls and args.floor:
        sys.exit("remote_latency: --floor measures plain HTTP; run it "
                 "without --tls")
    if args.pin and not {0, 1} <= os.sched_getaffinity(0):
        sys.exit("remote_latency: --pin needs CPUs 0 and 1")
    why = remote_servers.why_unavailable()
    if why:
        sys.exit("remote_latency: " + why)
    work = tempfile.mkdtemp(prefix="sluice-remote-bench-")
    data = args.data or os.path.join(work, "data")
    if not os.path.isdir(os.path.join(data, "photos", "train")):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_photos.py"),
                        "--out", data, "--images", str(args.images)],
                       check=True, stdout=subprocess.DEVNULL)
    train = os.path.join(data, "photos", "train")
    classes = sorted(os.listdir(train))
    files = {}
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(train, c))):
            with open(os.path.join(train, c, f), "rb") as fh:
                files["photos/%s/%s" % (c, f)] = (label, fh.read())
    # Shards of ~64 pictures, as WebDataset writes them.
    shards, items = {}, sorted(files.items())
    for s in range(0, len(items), 64):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w",
                          format=tarfile.USTAR_FORMAT) as t:
            for i, (name, (label, jpg)) in enumerate(items[s:s + 64]):
                for ext, payload in (("jpg", jpg), ("cls", b"%d" % label)):
                    info = tarfile.TarInfo("%06d.%s" % (s + i, ext))
                    info.size = len(payload)
                    t.addfile(info, io.BytesIO(payload))
        shards["shards/s-%04d.tar" % (s // 64)] = out.getvalue()
    nshards = len(shards)
    # Pinned: the pipeline has one core (CPU 0), in the spec (for `sluice
    # tune`, which takes no --threads) and on the command line.
    steps = STEPS % (args.epochs, 1 if args.pin else 2)

    srv = remote_servers.Servers(os.path.join(work, "servers")).start()
    try:
        for rel, data_bytes in shards.items():
            srv.put_http(rel, data_bytes)
        for rel, (_, jpg) in files.items():
            srv.put_http(rel, jpg)
        srv.put_s3({k: v for k, (_, v) in files.items()})
        ca = ""
        if args.servers == "nginx":
            s3 = srv.nginx_with_latency(args.delay_ms, s3=True, tls=args.tls)
            http = srv.nginx_with_latency(args.delay_ms, tls=args.tls)
            if args.tls:
                ca = ", ca_bundle: '%s'" % srv.ca_bundle
        elif args.tls:
            sys.exit("remote_latency: --tls needs --servers nginx")
        else:
            s3 = srv.delay_proxy(srv.s3_port, args.delay_ms)
            http = srv.delay_proxy(srv.nginx_port, args.delay_ms)
        env = dict(os.environ, AWS_ACCESS_KEY_ID=remote_servers.ACCESS_KEY,
                   AWS_SECRET_ACCESS_KEY=remote_servers.SECRET_KEY)
        if args.pin:
            pin_children(1)

        def spec(name, source):
            path = os.path.join(work, name + ".yaml")
            with open(path, "w") as f:
                f.write("pipeline: %s\nseed: 1\nsource:\n  %s\n%s"
                        % (name, source, steps))
            return path

        brace = "{0000..%04d}" % (nshards - 1)
        wds = ("webdataset: {files: '%s/shards/s-%s.tar'%s, fields: "
               "[{ext: jpg, name: data}, {ext: cls, name: label, type: i64}]}")
        pipelines = {
            "image_folder over s3://": (
                spec("local_if", "image_folder: {root: '%s/photos'}" % srv.www),
                lambda c: "image_folder: {root: 's3://%s/photos', remote: "
                          "{endpoint: %s%s%s}}" % (
                              remote_servers.BUCKET, s3,
                              ", concurrency: %d" % c if c else "", ca)),
            "webdataset over http://": (
                spec("local_wds", wds % (srv.www, brace, "")),
                lambda c: wds % (http, brace,
                                 ", remote: {chunk_size: 1MiB%s%s}" % (
                                     ", concurrency: %d" % c if c else "",
                                     ca))),
        }
        if args.only:
            pipelines = {k: v for k, v in pipelines.items()
                         if k.startswith(args.only)}
        sweep = [int(x) for x in args.sweep.split(",")]
        if args.serve_only:
            pre = "AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s " % (
                remote_servers.ACCESS_KEY, remote_servers.SECRET_KEY)
            for name, (local, remote) in pipelines.items():
                print("# %s" % name)
                print("%s run %s --sink null" % (args.sluice, local))
                for c in sweep:
                    print("%s%s run %s --sink null" % (
                        pre, args.sluice,
                        spec("%s_%d" % (name[:3], c), remote(c))))
            sys.stdout.flush()
            try:
                input("servers running; Enter stops them\n")
            except (EOFError, KeyboardInterrupt):
                pass
            return
        # Every configuration: (pipeline, label) -> [sluice run args].
        configs = {}
        tuned = {}
        peers = []
        for name, (local, remote) in pipelines.items():
            configs[(name, "local")] = [local]
            if args.peer and name.startswith("image_folder"):
                for w in [int(x) for x in args.peer_workers.split(",")]:
                    common = ["--prefix", "photos/", "--epochs",
                              str(args.epochs), "--workers", str(w),
                              "--threads", str(args.peer_threads)]
                    for where, a in (("local", ["--local", srv.www]),
                                     ("s3", ["--endpoint", s3, "--bucket",
                                             remote_servers.BUCKET] +
                                      (["--ca-bundle", srv.ca_bundle]
                                       if args.tls else []))):
                        label = "peer %s %d" % (where, w)
                        if label not in peers:
                            peers.append(label)
                        configs[(name, label)] = ("peer", a + common)
            for c in sweep:
                configs[(name, c)] = [spec("%s_%d" % (name[:3], c),
                                           remote(c))]
            free = spec("%s_tuned" % name[:3], remote(0))
            tuned[name] = []
            for k in range(args.tunes):
                sched, n, lat = tune(
                    args.sluice, free,
                    os.path.join(work, "tune_%s_%d" % (name[:3], k)), env,
                    args.pin)
                tuned[name].append((n, lat))
                configs[(name, "tuned%d" % k)] = [free, "--schedule", sched]
        results = {k: [] for k in configs}
        load_before = os.getloadavg()
        stats = os.path.join(work, "stats.json")
        for _ in range(args.repeats):
            for k, a in configs.items():
                if isinstance(a, tuple):
                    results[k].append(peer_run(a[1], env, args.pin))
                else:
                    results[k].append(run(args.sluice, a, env, args.pin,
                                          stats))
        load_after = os.getloadavg()
        print("%d pictures (%d shards of 64), %d epochs, %g ms added per "
              "request, %d cores%s; servers: %s; median "
              "of %d runs; load average (1, 5, 15 min) %.2f %.2f %.2f before "
              "the runs, %.2f %.2f %.2f after\n"
              % ((len(files), nshards, args.epochs, args.delay_ms,
                  os.cpu_count(),
                  " (pinned: servers on CPU 1, sluice on CPU 0 at 1 thread)"
                  if args.pin else "",
                  args.servers + (" over TLS (https://)" if args.tls else ""),
                  args.repeats) +
                 load_before +
                 load_after))
        for name in pipelines:
            base = statistics.median(r["rate"]
                                     for r in results[(name, "local")])
            print("### %s\n" % name)
            print("| requests in flight | records/s | vs local | CPU ms/record "
                  "| servers' CPU ms/record | faults/record | switches/record "
                  "| requests/record | KB received/record |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            best = 0
            tunes = ["tuned%d" % k for k in range(args.tunes)]
            for label in ["local"] + sweep + tunes + peers:
                if (name, label) not in results:
                    continue
                rs = results[(name, label)]
                def per(key, scale=1.0):
                    return statistics.median(
                        r[key] / r["records"] for r in rs) * scale
                rate = statistics.median(r["rate"] for r in rs)
                cpu, scpu = per("cpu", 1e3), per("servers", 1e3)
                if label in sweep:
                    best = max(best, rate)
                shown = ("local files" if label == "local" else
                         "tuned #%d: %d (%d ms median latency)" % (
                             (int(label[5:]) + 1,) +
                             tuned[name][int(label[5:])])
                         if label in tunes else
                         "torch DataLoader + %s, %s workers%s" % (
                             "boto3 over s3://" if label.split()[1] == "s3"
                             else "local files", label.split()[2],
                             "" if label.split()[1] == "local" else
                             ", %d GETs in flight each" % args.peer_threads)
                         if label in peers else str(label))
                print("| %s | %.0f | %.2f× | %.3f | %.3f | %.2f | %.2f | "
                      "%.3f | %.1f |"
                      % (shown, rate, rate / base, cpu, scpu, per("faults"),
                         per("switches"), per("requests"),
                         per("bytes", 1e-3)))
            for w in sorted({l.split()[2] for l in peers}):
                got = [statistics.median(r["rate"] for r in
                                         results.get((name, "peer %s %s"
                                                      % (k, w)), []))
                       for k in ("s3", "local")
                       if (name, "peer %s %s" % (k, w)) in results]
                if len(got) == 2:
                    print("\nthe peer at %s workers over s3:// against its "
                          "own local files: %.2f× (its rows' \"vs local\" "
                          "are against sluice's local files)" % (
                              w, got[0] / got[1]), end="")
            print("\ntuned / best of the sweep: %s\n" % ", ".join(
                "%.2f" % (statistics.median(
                    r["rate"] for r in results[(name, t)]) / best)
                for t in tunes))
        if args.floor:
            floor(args, work, pipelines, results, env, s3, http,
                  sorted(files), nshards)
    finally:
        srv.stop()
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for d in sorted(os.listdir(work)):
                if d.startswith("tune_"):
                    shutil.copytree(os.path.join(work, d),
                                    os.path.join(args.keep, d),
                                    dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
