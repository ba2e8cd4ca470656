"""python -m localweb serve|seeds|truth: run the local web, list its seeds, dump its ground truth."""
from __future__ import annotations

import argparse
import logging
import sys

from localweb.config import load_config
from localweb.proxy import serve_until_signalled
from localweb.web import LocalWeb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localweb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("serve", "serve until SIGTERM/SIGINT; prints one JSON line when ready"),
                            ("seeds", "print the seed URLs, one per line"),
                            ("truth", "write the ground truth as JSON")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--replay", nargs="*", default=[], metavar="FILE", help="WARC files to replay")
        p.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a conf/localweb.yaml setting")
        if name == "serve":
            p.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: conf, 0 = free)")
        if name == "truth":
            p.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    web = LocalWeb(load_config(args.override), replay=args.replay, port=getattr(args, "port", None))

    if args.command == "seeds":
        print("\n".join(web.seeds))
    elif args.command == "truth":
        web.truth.dump(args.out)
        print(f"wrote ground truth for {len(web.truth)} URLs on {len(web.hosts)} hosts to {args.out}",
              file=sys.stderr)
    else:
        serve_until_signalled(web)
        print("local web stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
