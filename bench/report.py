#!/usr/bin/python3
"""Turns the raw outputs of one bench/run.sh run into the results table.

Reads OUT/ (written by run.sh), one file per round N of each benchmark:
decode_only_N.json, decode_photos_N.json and decode_photos_rst_N.json (Google Benchmark),
torch_imagenet_N.json and torch_photos_N.json, numpy_criteo_N.json,
sluice_{imagenet,photos,photos_auto,photos_rst,photos_rst_auto,criteo}_N.txt (`sluice bench` output) with
rusage_sluice_*_N.json (bench/rusage.py: the process's getrusage) and
stats_sluice_*_N.json (`--stats-json`: images processed), plus manifest.json
and photos_manifest.json of the data and meta.json (machine and command). Each
figure is the median over the rounds. Prints the table and writes it as
Markdown.

Usage: report.py OUT RESULTS.md
"""

import glob
import json
import os
import re
import statistics
import sys


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def sluice_figures(out, name):
    """Median source records/s over the repeats, or a reason why none."""
    rates, threads = [], None
    files = sorted(p for p in glob.glob(os.path.join(out, "sluice_%s_*.txt" % name))
                   if re.fullmatch(r"sluice_%s_\d+\.txt" % re.escape(name),
                                   os.path.basename(p)))
    for path in files:
        with open(path, errors="replace") as f:
            text = f.read()
        m = re.search(r"source records/s\s+([0-9.eE+]+)", text)
        if m:
            rates.append(float(m.group(1)))
        t = re.search(r":\s*(\d+) threads?", text)
        if t:
            threads = int(t.group(1))
    if rates:
        return {"rate": statistics.median(rates), "runs": rates, "threads": threads}
    reason = "pending runtime"
    status = os.path.join(out, "sluice_%s.status" % name)
    if os.path.exists(status):
        with open(status) as f:
            reason = f.read().strip() or reason
    return {"rate": None, "reason": reason}


def resource_figures(out, name):
    """Medians over the rounds of what getrusage counted for `sluice bench
    NAME`: peak RSS (MiB), system time as a share of the process's CPU time,
    minor page faults, CPU milliseconds (user + system) and context switches
    (voluntary + involuntary) per image (over every image the run decoded,
    warm-up and start-up included), or None."""
    rss, sys_share, faults, cpu_ms, switches = [], [], [], [], []
    for path in sorted(glob.glob(os.path.join(out, "rusage_sluice_%s_*.json" % name))):
        m = re.fullmatch(r"rusage_sluice_%s_(\d+)\.json" % re.escape(name),
                         os.path.basename(path))
        ru = load_json(path)
        if not m or not ru or ru.get("exit_code") != 0:
            continue
        rss.append(ru["max_rss_kib"] / 1024.0)
        cpu = ru["user_seconds"] + ru["system_seconds"]
        if cpu > 0:
            sys_share.append(ru["system_seconds"] / cpu)
        stats = load_json(os.path.join(out, "stats_sluice_%s_%s.json" % (name, m.group(1))))
        images = 0
        for st in (stats or {}).get("stages", []):
            if st.get("kind") == "element":
                images = st.get("elements_in", 0)
                break
        if images:
            faults.append(ru["minor_faults"] / images)
            cpu_ms.append(1000.0 * cpu / images)
            if "voluntary_switches" in ru:
                switches.append((ru["voluntary_switches"] +
                                 ru.get("involuntary_switches", 0)) / images)
    if not rss:
        return None
    med = lambda v: statistics.median(v) if v else None
    return {"rss_mib": med(rss), "sys_share": med(sys_share),
            "faults_per_image": med(faults), "cpu_ms_per_image": med(cpu_ms),
            "switches_per_image": med(switches), "rounds": len(rss)}


def round_files(out, prefix):
    """OUT/PREFIX_N.json for every round N (not PREFIX_rst_N.json)."""
    return sorted(p for p in glob.glob(os.path.join(out, "%s_*.json" % prefix))
                  if re.fullmatch(r"%s_\d+\.json" % re.escape(prefix),
                                  os.path.basename(p)))


def decode_figures(out, prefix="decode_only"):
    """{threads: median items/s} over the rounds' Google Benchmark JSONs."""
    runs = {}
    for path in round_files(out, prefix):
        for b in (load_json(path) or {}).get("benchmarks", []):
            m = re.search(r"threads:(\d+)", b.get("name", ""))
            if (b.get("error_occurred") or not m or "items_per_second" not in b
                    or b.get("run_type", "iteration") != "iteration"):
                continue
            runs.setdefault(int(m.group(1)), []).append(b["items_per_second"])
    return {t: statistics.median(r) for t, r in runs.items()}, runs


def decode_cpu_ms(out, prefix="decode_only"):
    """Median CPU milliseconds per image of the 1-thread decode loop (Google
    Benchmark's cpu_time per iteration), or None."""
    cpu = []
    for path in round_files(out, prefix):
        for b in (load_json(path) or {}).get("benchmarks", []):
            if (b.get("error_occurred") or "threads:1" not in b.get("name", "")
                    or b.get("run_type", "iteration") != "iteration"
                    or "cpu_time" not in b):
                continue
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(
                b.get("time_unit", "ns"), 1e-6)
            cpu.append(b["cpu_time"] * scale)
    return statistics.median(cpu) if cpu else None


def merge_rounds(out, prefix, key):
    """Merges the per-round peer JSONs: the runs of every setting (`key` is
    "settings" or "modes") are pooled and their median recomputed; the peer's
    figure is the best median (the plain Python loop never counts)."""
    rounds = [load_json(p) for p in
              round_files(out, prefix)]
    rounds = [r for r in rounds if r]
    if not rounds:
        return None
    merged = dict(rounds[0])
    pooled = {}
    for r in rounds:
        for name, s in r[key].items():
            pooled.setdefault(name, []).extend(s["runs"])
    merged[key] = {name: {"runs": runs, "median": statistics.median(runs)}
                   for name, runs in pooled.items()}
    contenders = [n for n in pooled if n != "python"] or list(pooled)
    best = max(contenders, key=lambda n: merged[key][n]["median"])
    merged["rate"] = merged[key][best]["median"]
    merged["best"] = best
    if key == "settings":
        merged["best_num_workers"] = best
    return merged


def fmt(x, digits=0):
    if x is None:
        return "—"
    return "{:,.{d}f}".format(x, d=digits)


def ratio(a, b):
    if a is None or not b:
        return None
    return a / b


def verdict(r, target):
    if r is None:
        return "pending"
    return "met" if r >= target else "NOT met"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: report.py OUT RESULTS.md")
    out, results_path = sys.argv[1], sys.argv[2]
    meta = load_json(os.path.join(out, "meta.json")) or {}
    manifest = load_json(os.path.join(out, "manifest.json")) or {}
    torch = merge_rounds(out, "torch_imagenet", "settings")
    numpy_ = merge_rounds(out, "numpy_criteo", "modes")
    s_img = sluice_figures(out, "imagenet")
    s_tab = sluice_figures(out, "criteo")
    decode, decode_runs = decode_figures(out)
    threads = s_img.get("threads") or meta.get("cores")
    dec_same = decode.get(threads) if threads else None
    if dec_same is None and decode:
        threads = max(decode)
        dec_same = decode[threads]

    # Real pictures (bench/gen_photos.py).
    photos = load_json(os.path.join(out, "photos_manifest.json")) or {}
    torch_ph = merge_rounds(out, "torch_photos", "settings")
    s_ph = sluice_figures(out, "photos")
    s_auto = sluice_figures(out, "photos_auto")
    dec_ph, dec_ph_runs = decode_figures(out, "decode_photos")
    ph_threads = s_ph.get("threads") or threads
    dec_ph_same = dec_ph.get(ph_threads) if ph_threads else None
    torch_ph_rate = torch_ph["rate"] if torch_ph else None
    r_ph_torch = ratio(s_ph["rate"], torch_ph_rate)
    r_ph_decode = ratio(s_ph["rate"], dec_ph_same)
    r_auto_decode = ratio(s_auto["rate"], dec_ph_same)
    # The same pictures with restart markers (jpegtran -restart 1B -optimize).
    s_rst = sluice_figures(out, "photos_rst")
    s_rst_auto = sluice_figures(out, "photos_rst_auto")
    dec_rst, _ = decode_figures(out, "decode_photos_rst")
    dec_rst_same = dec_rst.get(ph_threads) if ph_threads else None

    torch_rate = torch["rate"] if torch else None
    numpy_rate = numpy_["rate"] if numpy_ else None
    r_torch = ratio(s_img["rate"], torch_rate)
    r_decode = ratio(s_img["rate"], dec_same)
    r_numpy = ratio(s_tab["rate"], numpy_rate)

    def sluice_cell(s, unit):
        if s["rate"] is None:
            return s["reason"]
        return "%s %s" % (fmt(s["rate"]), unit)

    lines = []
    lines.append("# sluice benchmark results")
    lines.append("")
    lines.append("- machine: %s, %s cores, %s GiB memory" % (
        meta.get("cpu", "?"), meta.get("cores", "?"), meta.get("memory_gib", "?")))
    lines.append("- date: %s; %s" % (meta.get("date", "?"),
                                    meta.get("sluice_version", "sluice ?")))
    img = manifest.get("imagenet", {})
    crt = manifest.get("criteo", {})
    if img:
        lines.append("- images: %d JPEGs, 300–600 px per side, %.0f MB "
                     "(%.0f / %.0f / %.0f KB min / median / max)" % (
                         img["images"], img["bytes"] / 1e6, img["kb_min"],
                         img["kb_median"], img["kb_max"]))
    if photos:
        lines.append("- real pictures: %d JPEGs cut from %s (bench/gen_photos.py), "
                     "300–600 px per side, %.0f MB (%.0f / %.0f / %.0f KB min / median / max, "
                     "%.2f bits per pixel); %s" % (
                         photos["images"], photos.get("source", "?"), photos["bytes"] / 1e6,
                         photos["kb_min"], photos["kb_median"], photos["kb_max"],
                         photos.get("bits_per_pixel", 0),
                         ", ".join("%s: %d" % kv for kv in sorted(photos.get("encodings", {}).items()))))
    if crt:
        lines.append("- Criteo-style TSV: %s rows in %d files, %.0f MB "
                     "(%.1f %% empty dense cells, %.1f %% empty categorical cells)" % (
                         fmt(crt["rows"]), crt["files"], crt["bytes"] / 1e6,
                         100 * crt["empty_dense_fraction"],
                         100 * crt["empty_cat_fraction"]))
    with open("/proc/loadavg") as f:
        load_end = f.read().split()[0]
    lines.append("- 1-minute load average: %s at the start, %s at the end "
                 "(other work on the machine lowers every figure)" % (
                     meta.get("load_at_start", "?"), load_end))
    repeats = meta.get("repeats", "?")
    lines.append("- each figure is the median of %s run%s; command: `%s`" % (
        repeats, "" if repeats == 1 else "s", meta.get("command", "bench/run.sh")))
    lines.append("")
    lines.append("| pipeline | sluice | peer | peer figure | sluice / peer | target |")
    lines.append("|---|---|---|---|---|---|")
    lines.append("| ImageNet-style (decode, random_resized_crop 224, flip, normalize, CHW, batch 128) "
                 "| %s | torch DataLoader%s | %s images/s | %s | ≥ 3× (%s) |" % (
                     sluice_cell(s_img, "images/s"),
                     " (best num_workers=%s)" % torch["best_num_workers"] if torch else "",
                     fmt(torch_rate), fmt(r_torch, 2) + "×" if r_torch else "—",
                     verdict(r_torch, 3.0)))
    lines.append("| same | %s | libjpeg-turbo read+decode loop, %s thread%s "
                 "| %s images/s | %s | ≥ 0.6× (%s) |" % (
                     sluice_cell(s_img, "images/s"), threads,
                     "" if threads == 1 else "s", fmt(dec_same),
                     fmt(r_decode, 2) + "×" if r_decode else "—",
                     verdict(r_decode, 0.6)))
    ph_name = "real pictures: same pipeline, exact decode, antialiased resize"
    lines.append("| %s | %s | torch DataLoader%s | %s images/s | %s | ≥ 3.5× (%s) |" % (
        ph_name, sluice_cell(s_ph, "images/s"),
        " (best num_workers=%s)" % torch_ph["best_num_workers"] if torch_ph else "",
        fmt(torch_ph_rate), fmt(r_ph_torch, 2) + "×" if r_ph_torch else "—",
        verdict(r_ph_torch, 3.5)))
    lines.append("| same | %s | libjpeg-turbo read+decode loop, %s thread%s "
                 "| %s images/s | %s | ≥ 0.85× (%s) |" % (
                     sluice_cell(s_ph, "images/s"), ph_threads,
                     "" if ph_threads == 1 else "s", fmt(dec_ph_same),
                     fmt(r_ph_decode, 2) + "×" if r_ph_decode else "—",
                     verdict(r_ph_decode, 0.85)))
    lines.append("| real pictures, `decode_image: {scale: auto}` | %s | same decode loop "
                 "| %s images/s | %s | ≥ 1.3× (%s) |" % (
                     sluice_cell(s_auto, "images/s"), fmt(dec_ph_same),
                     fmt(r_auto_decode, 2) + "×" if r_auto_decode else "—",
                     verdict(r_auto_decode, 1.3)))
    for label, s in (("restart-marked pictures (the same files through `jpegtran -restart 1B "
                      "-optimize`), exact decode", s_rst),
                     ("restart-marked pictures, `scale: auto`", s_rst_auto)):
        if s["rate"] is None and dec_rst_same is None:
            continue
        target = "≥ 1.3× (%s)" % verdict(ratio(s["rate"], dec_ph_same), 1.3) \
            if "auto" in label else "—"
        lines.append("| %s | %s | the decode loop on the original pictures "
                     "| %s images/s | %s | %s |" % (
                         label, sluice_cell(s, "images/s"), fmt(dec_ph_same),
                         fmt(ratio(s["rate"], dec_ph_same), 2) + "×"
                         if ratio(s["rate"], dec_ph_same) else "—", target))
        lines.append("| same | %s | the decode loop on the restart-marked pictures "
                     "| %s images/s | %s | — |" % (
                         sluice_cell(s, "images/s"), fmt(dec_rst_same),
                         fmt(ratio(s["rate"], dec_rst_same), 2) + "×"
                         if ratio(s["rate"], dec_rst_same) else "—"))
    lines.append("| Criteo-style (parse, filter, fill_missing, log map, hash_bucket, batch 4096) "
                 "| %s | Python/numpy (best: %s) | %s rows/s | %s | ≥ 5× (%s) |" % (
                     sluice_cell(s_tab, "rows/s"),
                     numpy_["best"] if numpy_ else "—", fmt(numpy_rate),
                     fmt(r_numpy, 2) + "×" if r_numpy else "—",
                     verdict(r_numpy, 5.0)))
    lines.append("")
    lines.append("What the kernel counted per `sluice bench` process (getrusage; medians over "
                 "the rounds; per image over every image decoded, start-up and warm-up "
                 "included):")
    lines.append("")
    lines.append("| sluice run | images/s | peak RSS | sys share of CPU | minor faults / image "
                 "| CPU ms / image | context switches / image |")
    lines.append("|---|---|---|---|---|---|---|")
    for label, name, s in (("synthetic images", "imagenet", s_img),
                           ("real pictures, exact", "photos", s_ph),
                           ("real pictures, scale: auto", "photos_auto", s_auto),
                           ("restart-marked pictures, exact", "photos_rst", s_rst),
                           ("restart-marked pictures, scale: auto", "photos_rst_auto",
                            s_rst_auto)):
        res = resource_figures(out, name)
        if res is None:
            continue
        lines.append("| %s | %s | %s MiB | %s | %s | %s | %s |" % (
            label, fmt(s["rate"]), fmt(res["rss_mib"]),
            "%.1f %%" % (100 * res["sys_share"]) if res["sys_share"] is not None else "—",
            fmt(res["faults_per_image"], 1),
            "%.3f" % res["cpu_ms_per_image"] if res["cpu_ms_per_image"] else "—",
            "%.2f" % res["switches_per_image"] if res["switches_per_image"] else "—"))
    dec_cpu = decode_cpu_ms(out, "decode_photos")
    if dec_cpu:
        lines.append("")
        lines.append("The decode-only loop on the real pictures takes %.3f CPU ms per image "
                     "(1 thread, Google Benchmark's cpu_time, median over the rounds): "
                     "its CPU per image over a pipeline's is what that pipeline would reach "
                     "against it with every core busy." % dec_cpu)
    lines.append("")
    lines.append("Details:")
    lines.append("")
    if s_img["rate"] is not None:
        lines.append("- sluice image runs: %s images/s (%s threads)" % (
            ", ".join(fmt(r) for r in s_img["runs"]), s_img.get("threads")))
    if s_tab["rate"] is not None:
        lines.append("- sluice Criteo runs: %s rows/s (%s threads)" % (
            ", ".join(fmt(r) for r in s_tab["runs"]), s_tab.get("threads")))
    for label, s in (("real pictures", s_ph), ("real pictures, scale: auto", s_auto)):
        if s["rate"] is not None:
            lines.append("- sluice %s runs: %s images/s (%s threads)" % (
                label, ", ".join(fmt(r) for r in s["runs"]), s.get("threads")))
    for t in sorted(dec_ph):
        lines.append("- decode-only loop on the real pictures, %d thread%s: %s images/s (runs %s)" % (
            t, "" if t == 1 else "s", fmt(dec_ph[t]),
            ", ".join(fmt(r) for r in dec_ph_runs[t])))
    if torch_ph:
        for w, s in sorted(torch_ph["settings"].items(), key=lambda kv: int(kv[0])):
            lines.append("- torch DataLoader on the real pictures, num_workers=%s: %s images/s "
                         "(runs %s)" % (w, fmt(s["median"]),
                                        ", ".join(fmt(r) for r in s["runs"])))
    for t in sorted(decode):
        lines.append("- decode-only loop, %d thread%s: %s images/s (runs %s)" % (
            t, "" if t == 1 else "s", fmt(decode[t]),
            ", ".join(fmt(r) for r in decode_runs[t])))
    if torch:
        for w, s in sorted(torch["settings"].items(), key=lambda kv: int(kv[0])):
            lines.append("- torch DataLoader num_workers=%s: %s images/s (runs %s)" % (
                w, fmt(s["median"]), ", ".join(fmt(r) for r in s["runs"])))
    if numpy_:
        names = {"numpy": "numpy, 1 process", "python": "plain Python per-line loop"}
        for k, s in numpy_["modes"].items():
            label = names.get(k) or "numpy in torch DataLoader, num_workers=%s" % k[len("torch_w"):]
            lines.append("- %s: %s rows/s (runs %s)" % (
                label, fmt(s["median"]), ", ".join(fmt(r) for r in s["runs"])))
    check = os.path.join(out, "criteo_check.txt")
    if os.path.exists(check):
        with open(check) as f:
            last = (f.read().strip().splitlines() or ["no output"])[-1]
        lines.append("- Criteo output check (sluice `--sink npy` vs the numpy peer): %s"
                     % last.replace("check: ", ""))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(results_path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
