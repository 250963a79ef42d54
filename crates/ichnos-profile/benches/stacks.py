#!/usr/bin/env python3
"""Samples and complete stacks in a profiler's output, counted the same way
for every tool: a stack is complete when its outermost frame is where a
thread starts (_start, or clone3 for threads). Samples in the workload's
own functions only (run, stage_a, stage_b, leaf_heavy, leaf_light).

usage: stacks.py perf-script FILE [--all]  (the text `perf script` prints)
       stacks.py folded FILE [--all]       (`ichnos report --format folded`)
       stacks.py samply FILE [--all]       (samply's profile.json(.gz),
                                            symbolized with its .syms.json
                                            beside it)
--all: every sample, not only the workload's.
prints: SAMPLES COMPLETE
"""
import gzip
import json
import sys

OWN = {"run", "stage_a", "stage_b", "leaf_heavy", "leaf_light"}
ALL = "--all" in sys.argv[3:]


def own(name):
    """Whether a sample whose innermost frame is `name` is counted."""
    return ALL or name in OWN
STARTS = {"_start", "clone3", "__clone3"}


def base(name):
    return name.split("+")[0]


def perf_script(path):
    samples = complete = 0
    frames = []

    def flush():
        nonlocal samples, complete
        if frames and own(base(frames[0])):
            samples += 1
            complete += base(frames[-1]) in STARTS
        frames.clear()

    for line in open(path, errors="replace"):
        if not line.strip():
            flush()
        elif line[0] in " \t":
            parts = line.split()
            # Inlined frames aside, as `ichnos report --no-inline` shows.
            if len(parts) >= 2 and parts[-1] != "(inlined)":
                frames.append(parts[1])
    flush()
    return samples, complete


def folded(path):
    samples = complete = 0
    for line in open(path, errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")[1:]
        if not frames or not own(base(frames[-1])):
            continue
        n = int(count)
        samples += n
        complete += n if base(frames[0]) in STARTS else 0
    return samples, complete


def samply(path):
    """samply's processed profile, named through the symbol tables that
    --unstable-presymbolicate writes beside it (PATH.syms.json, where
    PATH is the profile without .gz)."""
    import bisect

    opener = gzip.open if path.endswith(".gz") else open
    profile = json.load(opener(path, "rt"))
    stem = path[: -len(".gz")] if path.endswith(".gz") else path
    syms = json.load(open(stem + ".syms.json"))
    strings = syms["string_table"]
    tables = {}
    for lib in syms["data"]:
        # The function a symbol's address belongs to, inlined ones aside
        # (the last of its frames), as perf and `ichnos --no-inline` name it.
        rows = sorted(
            (s["rva"], s["size"], strings[s["frames"][-1]["function"]] if s.get("frames") else strings[s["symbol"]])
            for s in lib["symbol_table"]
        )
        tables[lib["code_id"]] = ([r[0] for r in rows], rows)
    libs = profile["libs"]
    samples = complete = 0
    for thread in profile["threads"]:
        frames, funcs = thread["frameTable"], thread["funcTable"]
        resources, stacks = thread["resourceTable"], thread["stackTable"]

        def name_of(frame):
            resource = funcs["resource"][frames["func"][frame]]
            if resource is None or resource < 0:
                return "?"
            lib = libs[resources["lib"][resource]]
            starts, rows = tables.get(lib.get("codeId"), ([], []))
            address = frames["address"][frame]
            i = bisect.bisect_right(starts, address) - 1
            if i >= 0 and address < rows[i][0] + rows[i][1]:
                return rows[i][2]
            return "?"

        for stack in thread["samples"]["stack"]:
            if stack is None:
                continue
            root = stack
            while stacks["prefix"][root] is not None:
                root = stacks["prefix"][root]
            if not own(base(name_of(stacks["frame"][stack]))):
                continue
            samples += 1
            complete += base(name_of(stacks["frame"][root])) in STARTS
    return samples, complete


def main():
    kind, path = sys.argv[1], sys.argv[2]
    samples, complete = {"perf-script": perf_script, "folded": folded, "samply": samply}[kind](path)
    print(samples, complete)


main()
