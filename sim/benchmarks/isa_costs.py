"""``mcf bench isa-costs``: the model backend's per-instruction costs against the RTL.

Runs one session of the tiny model on the RTL cluster (``--backend rtl``: Verilator, the build
cached) and the same session on the model backend (``mcf.sim.cluster.isa_model``) with the RTL
switch's link figures, uncalibrated; fits per instruction kind ``a x model cycles + b`` to the
RTL's measured busy cycles per node and step (``isa_model.fit``), and runs the model again with
the fit.  Prints TTFT and decode cycles and link bytes of the RTL and of both models, the gaps,
and the coefficients; ``--write`` stores the coefficients (with the run they come from) in
``sw/mars/profiles/<profile>-isa-costs.json``, which ``mcf run --backend model`` then uses.

The default runs (3 nodes, MARS, 8 tokens, chunks of 2 and of 4 tokens -- GEMMs of 1, 2 and 4
tokens, so a cost per token and a cost per instruction can be told apart -- decode 1) are not
the one the model-vs-RTL test checks (2 nodes, 16 tokens, chunk 4, decode 2:
tests/sim/rtlcluster/test_backend.py), so the test checks the calibration on a run it was not
fitted on.
"""
from __future__ import annotations

import json
import os
import time

NAME = "isa-costs"
HELP = "model backend vs RTL cluster: TTFT, decode cycles, link bytes; fit the per-instruction costs (--write)"


def add_arguments(p) -> None:
    from mcf.sw.cliutil import integer
    p.add_argument("--nodes", type=integer(1, 4), default=3, help="nodes (default: %(default)s)")
    p.add_argument("--scheme", choices=("mars", "ring", "zigzag"), default="mars", help="scheme (default: %(default)s)")
    p.add_argument("--prompt", type=integer(1, 64), default=8, help="prompt tokens (default: %(default)s)")
    p.add_argument("--chunks", type=_chunks, default=(2, 4),
                   help="chunk sizes in tokens, one run each, comma-separated (default: 2,4)")
    p.add_argument("--budget-tokens", type=integer(1, 1 << 20), default=4,
                   help="MARS KV budget per node in tokens (default: %(default)s)")
    p.add_argument("--decode", type=integer(0, 8), default=1, help="decode steps (default: %(default)s)")
    p.add_argument("--profile", default="kr260", help="hardware profile (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=900.0, help="bound of one step, seconds (default: %(default)s)")
    p.add_argument("--write", action="store_true",
                   help="write the fitted coefficients to sw/mars/profiles/<profile>-isa-costs.json")


def _chunks(text: str) -> tuple:
    import argparse
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected chunk sizes like 2,4") from None
    if not out or not all(1 <= c <= 8 for c in out):
        raise argparse.ArgumentTypeError(f"{text!r}: chunk sizes are 1..8 tokens")
    return out


def _session(args, chunk, factory):
    import numpy as np
    from mcf.sw.golden.weights import random_weights
    from mcf.sw.models import load_model
    from mcf.sw.runtime.runtime import Session
    cfg = load_model("tiny")
    prompt = [int(t) for t in np.random.default_rng(2).integers(0, cfg.vocab_size, args.prompt)]
    budget = args.budget_tokens * int(cfg.kv_token_bytes) if args.scheme == "mars" else None
    return Session(cfg, random_weights(cfg, 5), prompt, nodes=args.nodes, scheme=args.scheme, chunk=chunk,
                   budget=budget, decode=args.decode, group=16, factory=factory, timeout_s=args.timeout)


def _figures(rep) -> dict:
    return {"ttft_cycles": rep.ttft_cycles, "decode_cycles_per_token": rep.decode_cycles_per_token,
            "link_bytes_total": int(sum(rep.link_bytes.values())) if rep.link_bytes else 0}


def run(args) -> dict:
    from mcf.sim.cluster import isa_model
    from mcf.sim.rtlcluster import backend as rtl
    from mcf.sw.cliutil import write_text
    prof = rtl.model_profile(args.profile)

    def model(calibration):
        return lambda *a: isa_model.model_backend(*a, profile=prof, calibration=calibration)

    runs, rows, sim_s = [], {}, 0.0
    for chunk in args.chunks:
        t0 = time.monotonic()
        measured = _session(args, chunk, lambda *a: rtl.rtl_backend(*a, progress=lambda msg: None)).run()
        sim_s += time.monotonic() - t0
        plain_session = _session(args, chunk, model(None))
        plain = plain_session.run()
        if plain.tokens != measured.tokens:
            raise AssertionError(f"the model's tokens {plain.tokens} differ from the RTL's {measured.tokens}")
        programs = [plain_session.lw.prefill] + [plain_session.lw.decode_programs(k) for k in range(args.decode)]
        for k, r in isa_model.calibration_rows(measured, plain, programs).items():
            rows.setdefault(k, []).extend(r)
        runs.append((chunk, measured, plain))
    coef = {k: isa_model.fit(r) for k, r in rows.items() if any(x[1] for x in r)}
    out = {"run": {"nodes": args.nodes, "scheme": args.scheme, "prompt": args.prompt, "chunks": list(args.chunks),
                   "budget_tokens": args.budget_tokens if args.scheme == "mars" else None, "decode": args.decode,
                   "model": "tiny", "profile": args.profile},
           "coefficients": {k: [round(a, 4), round(b, 2)] for k, (a, b) in coef.items()}}
    for chunk, measured, plain in runs:
        fitted = _session(args, chunk, model(coef)).run()
        r = {"rtl": _figures(measured), "model_uncalibrated": _figures(plain), "model_calibrated": _figures(fitted),
             "ttft_gap_uncalibrated": round(isa_model.gap(plain.ttft_cycles, measured.ttft_cycles), 4),
             "ttft_gap_calibrated": round(isa_model.gap(fitted.ttft_cycles, measured.ttft_cycles), 4)}
        if measured.decode_cycles_per_token:
            r["decode_gap_calibrated"] = round(isa_model.gap(fitted.decode_cycles_per_token,
                                                             measured.decode_cycles_per_token), 4)
        out[f"chunk_{chunk}"] = r
    out.update({"rtl_simulation_s": round(sim_s, 1), "load_average_1min": round(os.getloadavg()[0], 2)})
    if args.write:
        path = isa_model.calibration_path(args.profile)
        chunks = ",".join(map(str, args.chunks))
        record = {"command": f"mcf bench isa-costs --nodes {args.nodes} --scheme {args.scheme} --prompt {args.prompt} "
                             f"--chunks {chunks} --budget-tokens {args.budget_tokens} --decode {args.decode} "
                             f"--profile {args.profile} --write",
                  "coefficients": out["coefficients"], "run": out["run"],
                  "measured": {f"chunk_{c}": out[f"chunk_{c}"] for c in args.chunks}}
        write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n", what="calibration")
        out["written"] = str(path)
    return out
