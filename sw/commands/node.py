"""``mcf node``: run one MCF node of an N-node job; started on every board by MPI.

    mpirun -H board0,board1,board2,board3 mcf node --model tiny --seq 256 --decode 2
    mcf node --world local --nodes 4 --model tiny --seq 256 --decode 2     # the same, one process

Rank = node id, world size = number of nodes.  Rank 0's request is broadcast, every rank plans
and lowers it (MARS), all meet at a barrier, each runs its node's program on the backend, and
rank 0 gathers the results, checks them against the plan and prints the report.  Every wait is
bounded by --timeout; a rank that times out ends the whole MPI job (MPI_Abort).
"""
from __future__ import annotations

import json
import os
import sys
import time

BACKENDS = ("model", "rtl", "board")


def register(sub) -> None:
    p = sub.add_parser("node", help="run one node of an N-node job (under mpirun, or --world local)",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=_raw())
    p.add_argument("--model", default="tiny", help="model config (default: %(default)s)")
    p.add_argument("--seq", type=int, default=256, help="prompt tokens (default: %(default)s)")
    p.add_argument("--chunk", type=int, default=None, help="chunk size B (default: the planner's choice)")
    p.add_argument("--scheme", default="mars", help="mars, ring, zigzag, full, pd, passq (default: %(default)s)")
    p.add_argument("--budget-tokens", type=int, default=None,
                   help="KV budget per node, in tokens (default: unlimited)")
    p.add_argument("--topology", default=None, help="switch, ring, mesh (default: the profile's)")
    p.add_argument("--decode", type=int, default=1, help="decode steps after prefill (default: %(default)s)")
    p.add_argument("--backend", choices=BACKENDS, default="model",
                   help="what runs a node's program: model (DDR model, packets over MPI); rtl and board "
                        "arrive with issue 13's program executor")
    p.add_argument("--world", choices=["auto", "mpi", "local"], default="auto",
                   help="mpi: one rank per node (under mpirun); local: every node in this process; "
                        "auto: mpi when started by mpirun (default)")
    p.add_argument("--nodes", type=int, default=None, help="nodes of a --world local run (under MPI: the ranks)")
    p.add_argument("--timeout", type=float, default=60.0, help="bound on every wait, seconds (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print rank 0's report as one JSON object")
    p.add_argument("--fault", default=None, help=argparse_suppress())
    p.set_defaults(func=run)


def _raw():
    import argparse
    return argparse.RawDescriptionHelpFormatter


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


def backend_for(name: str):
    if name == "model":
        from mcf.sw.launch.model import ModelBackend
        return ModelBackend()
    raise ValueError(f"--backend {name}: a node's program executor on the {name.upper()} arrives with "
                     f"issue 13 (ISA, sequencer, runtime); --backend model runs today")


def _fault(spec: str | None, rank: int) -> None:
    """Test hook: ``die:R`` ends rank R without a word, ``hang:R`` stalls it (bounded waits and
    MPI_Abort must end the job anyway)."""
    if not spec:
        return
    kind, _, who = spec.partition(":")
    if int(who) != rank:
        return
    if kind == "die":
        os._exit(3)
    if kind == "hang":
        time.sleep(3600)


def run(args) -> int:
    from mcf.sw.launch.job import run_rank
    from mcf.sw.launch.world import MpiWorld, launched_by_mpi

    if not 0 < args.timeout <= 24 * 3600:
        raise ValueError(f"--timeout {args.timeout}: must be in (0, 86400] s")
    if args.decode < 0:
        raise ValueError(f"--decode {args.decode}: must be >= 0")
    backend = backend_for(args.backend)
    kind = args.world if args.world != "auto" else ("mpi" if launched_by_mpi() else "local")
    request = {"model": args.model, "seq": args.seq, "chunk": args.chunk, "scheme": args.scheme,
               "budget_tokens": args.budget_tokens, "topology": args.topology, "decode": args.decode}
    start = time.monotonic()
    if kind == "mpi":
        world = MpiWorld(timeout=args.timeout)
        if args.nodes is not None and args.nodes != world.size:
            raise ValueError(f"--nodes {args.nodes} but mpirun started {world.size} ranks (rank = node id)")
        request["nodes"] = world.size
        try:
            _fault(args.fault, world.rank)
            report = run_rank(world, request if world.rank == 0 else None, backend)
        except (OSError, ValueError, KeyError) as exc:
            # one line from the rank that failed, then end every rank: nobody waits forever
            print(f"mcf node: error: rank {world.rank}: {exc}", file=sys.stderr, flush=True)
            world.abort(2)
            return 2
    else:
        if args.nodes is None:
            raise ValueError("--world local needs --nodes N")
        if not 1 <= args.nodes <= 64:
            raise ValueError(f"--nodes {args.nodes}: must be in [1, 64]")
        request["nodes"] = args.nodes
        report = _run_local(request, backend, args.nodes, args.timeout, args.fault)
    if report is None:
        return 0
    report["seconds"] = round(time.monotonic() - start, 3)
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)
    return 0


def _run_local(request, backend, nodes, timeout, fault):
    import threading

    from mcf.sw.launch.job import run_rank
    from mcf.sw.launch.world import LocalWorld
    worlds = LocalWorld.create(nodes, timeout)
    out: list = [None] * nodes
    errors: list = []

    def rank(r):
        try:
            if fault and fault.startswith("hang:") and int(fault.split(":")[1]) == r:
                return          # this node never takes part: the others must time out
            out[r] = run_rank(worlds[r], request if r == 0 else None, backend)
        except Exception as exc:     # reported below, with the rank; the others stop now
            errors.append((r, exc))
            worlds[r].abort(2)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 8 + 60)
    if errors:
        from mcf.sw.launch.world import LaunchAborted
        first = [e for e in errors if not isinstance(e[1], LaunchAborted)] or errors
        r, exc = first[0]
        if isinstance(exc, (OSError, ValueError, KeyError)):
            raise (OSError if isinstance(exc, OSError) else ValueError)(f"rank {r}: {exc}") from None
        raise exc
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"a node of the local run did not finish within {timeout * 8 + 60:g} s")
    return out[0]


def _print(report: dict) -> None:
    print(f"{report['nodes']} nodes ({report['world']}, backend {report['backend']}), scheme "
          f"{report['scheme']}, {report['chunks']} chunks: final KV layout matches the plan, every "
          f"compute node read its whole history")
    print(f"  bytes sent per node: prefill {report['prefill_link_bytes']}, in all {report['link_bytes']}; "
          f"packets {report['packets']}")
    print(f"  final layout (node: blocks): {report['final_layout']}")
    if report["decode"]:
        d = report["decode"]
        print(f"  decode: {d['tokens']} step(s), merged attention = one-place attention "
              f"(max |error| {d['max_abs_error']:.1e}), digest {d['digest'][:16]}")
    print(f"  {report['seconds']} s")
