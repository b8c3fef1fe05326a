"""`python -m app.k8s` (`make k8s`): render k8s/ from serve_config.yaml and k8s/profile.yaml.

    python -m app.k8s [--config serve_config.yaml] [--profile k8s/profile.yaml] [--out k8s]
                      [--check | --print-image]

`--check` writes nothing and exits 1 when the files under --out are not what rendering gives
(stale, missing or left over), naming them. `--print-image` prints only the image the
manifests run (repository:tag), for `docker build -t`. Another environment is another
profile and another --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.k8s.render import DEFAULT_CONFIG, DEFAULT_OUT, PROFILE_FILE, render, stale_files, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.k8s", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--profile", type=Path, default=None, help="default: <out>/profile.yaml")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare, write nothing")
    mode.add_argument("--print-image", action="store_true", help="print the image, write nothing")
    args = parser.parse_args(argv)
    profile = args.profile or args.out / PROFILE_FILE
    try:
        rendered = render(args.config, profile)
    except ValueError as exc:  # pydantic's ValidationError, ProductionConfigError, SizingError
        print(f"cannot render {args.out}: {exc}", file=sys.stderr)
        return 2
    if args.print_image:
        print(rendered.image)
        return 0
    d = rendered.demand
    summary = (
        f"deployments reserve {d.cpus_at_min:g}-{d.cpus_at_max:g} CPUs and "
        f"{d.memory_gib_at_min:.1f}-{d.memory_gib_at_max:.1f} GiB (min-max replicas); "
        f"image {rendered.image}"
    )
    if args.check:
        stale = stale_files(rendered, args.out)
        if stale:
            print(f"{args.out} is out of date, run `make k8s`: {', '.join(stale)}", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date; {summary}")
        return 0
    write(rendered, args.out)
    print(f"wrote {len(rendered.files)} files to {args.out}; {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
