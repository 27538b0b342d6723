"""Accuracy against ground truth: our client against bench/refserver.py (exactly known token
timing) at C = 1, 4, 16, 64. Passes when output tok/s is within 1% of the truth and the TTFT and
ITL medians within 0.5 ms.

The truth is what the server actually did, by its own monotonic clock: its medians of (first
write - the request's arrival, the kernel's receive stamp) and of the gaps between writes, and
tokens written over its span.
The nominal timing (--ttft-ms, --gap-ms) is printed beside it: asyncio's epoll timeout is rounded
up to whole milliseconds, so the server's writes land up to ~1 ms after their deadlines (more on a
busy machine); that is the server's deviation from its nominal schedule, not the client's error.

    /tmp/benchvenv/bin/python bench/accuracy.py [--client sweeper] [--ttft-ms 50] [--gap-ms 10] [--output-len 100]
                                                [--rounds 8] [--min-requests 32]
"""

from __future__ import annotations

import argparse
import sys

from common import CLIENTS, Truth, actual_truth, errors_against, machine_note, refserver, run_ours, server_lateness, within_bounds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--output-len", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--min-requests", type=int, default=32, help="per level, whatever C (medians at C = 1)")
    parser.add_argument("--levels", default="1,4,16,64")
    parser.add_argument("--client", default="sweeper", help="of " + ", ".join(CLIENTS) + " (bench/common.py)")
    args = parser.parse_args()
    print(machine_note())
    print(f"client: {args.client}")
    print(f"truth: TTFT {args.ttft_ms} ms, gap {args.gap_ms} ms, {args.output_len} tokens/request")
    print("| C | nominal tok/s | truth tok/s | measured tok/s | error | truth TTFT | measured TTFT (err) | "
          "truth ITL | measured ITL (err) | client lag p99 | server late p99 | valid | within bounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    with refserver(args.ttft_ms, args.gap_ms) as url:
        for c in (int(x) for x in args.levels.split(",")):
            truth = Truth(args.ttft_ms, args.gap_ms, args.output_len, c)
            m = run_ours(url, c, max(args.rounds * c, args.min_requests), args.output_len, client=args.client)
            late = server_lateness(url)
            actual = actual_truth(late)
            err = errors_against(m, actual)
            good = within_bounds(err)
            ok &= good
            print(f"| {c} | {truth.output_tok_s:.1f} | {actual['output_tok_s']:.1f} | {m['output_throughput']:.1f} | "
                  f"{err['tok_s_err_pct']:+.2f}% | {actual['ttft_ms']:.2f} | {m['median_ttft_ms']:.2f} ({err['ttft_err_ms']:+.2f}) | "
                  f"{actual['gap_ms']:.3f} | {m['median_itl_ms']:.3f} ({err['itl_err_ms']:+.3f}) | {m['client_lag_p99_ms']:.2f} ms | "
                  f"{late['late_p99_ms']:.2f} ms | {m['valid']} | {'yes' if good else 'NO'} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
