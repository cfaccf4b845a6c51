"""
A web server access log for the exactly-once example
(examples/exactly_once/README.md): C{--lines} requests in nginx's and
Apache's combined format from C{--clients} client addresses, the same file
for the same C{--seed}.

    python examples/exactly_once/access_log.py --lines 3000 > access.log
"""

from __future__ import annotations

import argparse
import random
import sys

PATHS = ("/", "/index.html", "/about.html", "/api/orders", "/api/orders/42", "/static/app.js", "/favicon.ico")
STATUSES = (200, 200, 200, 200, 301, 304, 404, 500)


def access_lines(count: int, clients: int, seed: int) -> list[str]:
    """C{count} combined-format lines (no newline), one request each, from C{clients} addresses."""
    rng = random.Random(seed)
    addresses = [f"10.0.0.{i + 1}" for i in range(clients)]
    lines = []
    for i in range(count):
        minute, second = divmod(i // 2, 60)
        lines.append(f'{rng.choice(addresses)} - - [22/Nov/2026:10:{minute % 60:02d}:{second:02d} +0000] '
                     f'"GET {rng.choice(PATHS)} HTTP/1.1" {rng.choice(STATUSES)} {rng.randrange(100, 5000)} '
                     f'"-" "curl/8.5.0"')
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000, help="requests to write (default 3000)")
    parser.add_argument("--clients", type=int, default=5, help="distinct client addresses (default 5)")
    parser.add_argument("--seed", type=int, default=1, help="the same seed writes the same file (default 1)")
    args = parser.parse_args(argv)
    if args.lines < 0 or args.clients < 1:
        parser.error("--lines must be 0 or more and --clients 1 or more")
    sys.stdout.write("".join(line + "\n" for line in access_lines(args.lines, args.clients, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
