"""A real templated corpus: AWS CLI reference pages rendered from botocore's service models.

botocore (PyPI) ships the JSON model of every AWS service API (``botocore/data/<service>/<api
version>/service-2.json``): each operation's documentation, input and output members with their
documentation, and which operations paginate. Each operation is rendered here as the reference
page ``aws <service> <operation>`` in the layout of the AWS CLI v1 help: description, synopsis,
options, the shared pagination and global options sections, output. Distinct commands therefore
share big templates (every page carries the same ~400-word global options section; paginated
``list``/``describe`` pages share the pagination block and often their output members).

**Same document** (the ``entity`` label, ``<service> <operation>``): one operation's page in
several *tracks*: the API versions of the same service that botocore still ships (ec2 has 8,
cloudfront 19, ...) and the same models in an older botocore release (``--old-release``,
fetched with ``pip download`` into ``--wheel-dir``), up to ``--max-tracks`` pages per
operation, newest first. Each page also carries its known-item query: the operation's one-line
description (its documentation's first sentence), as ``query``.

    python bench/templated_corpus.py --out /tmp/templated.jsonl            # ~15,000 pages
    python bench/templated_corpus.py --out /tmp/t.jsonl --entities 200 --no-old-release

Same options, same botocore releases -> the same bytes (the draw of operations is seeded).
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import os
import random
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

SOURCE = "aws-cli-reference"
DEFAULT_OLD_RELEASE = "1.31.0"
DEFAULT_WHEEL_DIR = Path.home() / ".cache" / "stream-dedupe" / "wheels"

GLOBAL_OPTIONS = """\
Global Options
--debug (boolean) Turn on debug logging.
--endpoint-url (string) Override command's default URL with the given URL.
--no-verify-ssl (boolean) By default, the AWS CLI uses SSL when communicating with AWS services. For each SSL \
connection, the AWS CLI will verify SSL certificates. This option overrides the default behavior of verifying SSL \
certificates.
--no-paginate (boolean) Disable automatic pagination. If automatic pagination is disabled, the AWS CLI will only \
make one call, for the first page of results.
--output (string) The formatting style for command output. json, text, table.
--query (string) A JMESPath query to use in filtering the response data.
--profile (string) Use a specific profile from your credential file.
--region (string) The region to use. Overrides config/env settings.
--version (string) Display the version of this tool.
--color (string) Turn on/off color output. on, off, auto.
--no-sign-request (boolean) Do not sign requests. Credentials will not be loaded if this argument is provided.
--ca-bundle (string) The CA certificate bundle to use when verifying SSL certificates. Overrides config/env settings.
--cli-read-timeout (int) The maximum socket read time in seconds. If the value is set to 0, the socket read will \
be blocking and not timeout. The default value is 60 seconds.
--cli-connect-timeout (int) The maximum socket connect time in seconds. If the value is set to 0, the socket \
connect will be blocking and not timeout. The default value is 60 seconds.
--cli-binary-format (string) The formatting style to be used for binary blobs. The default format is base64. The \
base64 format expects binary blobs to be provided as a base64 encoded string. The raw-in-base64-out format \
preserves compatibility with AWS CLI V1 behavior and binary values must be passed literally. When providing \
contents from a file that map to a binary blob fileb:// will always be treated as binary and use the file \
contents directly regardless of the cli-binary-format setting. When using file:// the file contents will need to \
properly formatted for the configured cli-binary-format.
--no-cli-pager (boolean) Disable cli pager for output.
--cli-auto-prompt (boolean) Automatically prompt for CLI input parameters.
--no-cli-auto-prompt (boolean) Disable automatically prompt for CLI input parameters."""

INPUT_OPTIONS = """\
--cli-input-json | --cli-input-yaml (string) Reads arguments from the JSON string provided. The JSON string follows \
the format provided by --generate-cli-skeleton. If other arguments are provided on the command line, those values \
will override the JSON-provided values. It is not possible to pass arbitrary binary values using a JSON-provided \
value as the string will be taken literally. This may not be specified along with --cli-input-yaml.
--generate-cli-skeleton (string) Prints a JSON skeleton to standard output without sending an API request. If \
provided with no value or the value input, prints a sample input JSON that can be used as an argument for \
--cli-input-json. Similarly, if provided yaml-input it will print a sample input YAML that can be used with \
--cli-input-yaml. If provided with the value output, it validates the command inputs and returns a sample output \
JSON for that command. The generated JSON skeleton is not stable between versions of the AWS CLI and there are no \
backwards compatibility guarantees in the JSON skeleton generated."""

PAGINATION = """\
{name} is a paginated operation. Multiple API calls may be issued in order to retrieve the entire data set of \
results. You can disable pagination by providing the --no-paginate argument.
--starting-token (string) A token to specify where to start paginating. This is the NextToken from a previously \
truncated response. For usage examples, see Pagination in the AWS Command Line Interface User Guide.
--page-size (integer) The size of each page to get in the AWS service call. This does not affect the number of \
items returned in the command's output. Setting a smaller page size results in more calls to the AWS service, \
retrieving fewer items in each call. This can help prevent the AWS service calls from timing out. For usage \
examples, see Pagination in the AWS Command Line Interface User Guide.
--max-items (integer) The total number of items to return in the command's output. If the total number of items \
available is more than the value specified, a NextToken is provided in the command's output. To resume \
pagination, provide the NextToken value in the starting-token argument of a subsequent command. Do not use the \
NextToken response element directly outside of the AWS CLI. For usage examples, see Pagination in the AWS Command \
Line Interface User Guide."""


def xform_name(name: str) -> str:
    """``DescribeDBInstances`` -> ``describe-db-instances`` (botocore's rule, with dashes)."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1-\2", name).lower()


def strip_html(text: str | None) -> str:
    """Documentation HTML as plain text, one paragraph a line."""
    if not text:
        return ""
    text = re.sub(r"</?(p|li|ul|ol|br|note|important)\b[^>]*>", "\n", text)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def first_sentence(text: str) -> str:
    """The first sentence of a plain text (the one-line description of a command)."""
    line = text.split("\n", 1)[0]
    match = re.match(r"(.+?[.!?])(\s|$)", line)
    return (match.group(1) if match else line).strip()


@dataclass(frozen=True)
class Track:
    """One rendering of the service models: a botocore release and an API version."""

    release: str
    api_version: str
    model: dict[str, Any]
    paginated: frozenset[str]


class Release:
    """The service models of one botocore release: an installed ``botocore/data`` or a wheel."""

    def __init__(self, version: str, location: Path) -> None:
        self.version = version
        self.zip = zipfile.ZipFile(location) if location.suffix == ".whl" else None
        self.root = location
        self.prefix = "botocore/data/" if self.zip else ""
        names = self.zip.namelist() if self.zip else [str(p.relative_to(location)) for p in location.rglob("*")]
        self.files = {n[len(self.prefix) :] for n in names if n.startswith(self.prefix)}

    def _read(self, name: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(self.prefix + name)
        return (self.root / name).read_bytes()

    def _load(self, stem: str) -> dict[str, Any] | None:
        for name, unzip in ((stem, False), (stem + ".gz", True)):
            if name in self.files:
                data = self._read(name)
                return dict(json.loads(gzip.decompress(data) if unzip else data))
        return None

    def services(self) -> dict[str, list[str]]:
        """API versions of each service, newest first."""
        found: dict[str, set[str]] = {}
        for name in self.files:
            parts = name.split("/")
            if len(parts) == 3 and parts[2] in ("service-2.json", "service-2.json.gz"):
                found.setdefault(parts[0], set()).add(parts[1])
        return {s: sorted(v, reverse=True) for s, v in sorted(found.items())}

    def track(self, service: str, api_version: str) -> Track:
        """The model (and paginated operations) of one API version of a service."""
        model = self._load(f"{service}/{api_version}/service-2.json") or {}
        paginators = self._load(f"{service}/{api_version}/paginators-1.json") or {}
        return Track(self.version, api_version, model, frozenset(paginators.get("pagination", {})))


def _type(shapes: dict[str, Any], ref: dict[str, Any]) -> str:
    return str(shapes.get(ref.get("shape", ""), {}).get("type", "string"))


def _shape_lines(shapes: dict[str, Any], ref: dict[str, Any], indent: str, depth: int) -> list[str]:
    """Enum values and nested members of a member's shape, as the CLI help shows them."""
    shape = shapes.get(ref.get("shape", ""), {})
    lines = []
    if shape.get("enum"):
        lines.append(f"{indent}Possible values: {', '.join(str(v) for v in shape['enum'][:40])}")
    if shape.get("type") == "list":
        shape = shapes.get(shape.get("member", {}).get("shape", ""), {})
    if shape.get("type") == "structure" and depth > 0:
        for sub, sub_ref in shape.get("members", {}).items():
            lines.append(f"{indent}{sub} -> ({_type(shapes, sub_ref)})")
            doc = strip_html(
                sub_ref.get("documentation") or shapes.get(sub_ref.get("shape", ""), {}).get("documentation")
            )
            if doc:
                lines.append(indent + doc)
            lines += _shape_lines(shapes, sub_ref, indent + "  ", depth - 1)
    return lines


def _members(shapes: dict[str, Any], shape_name: str | None, arrow: bool, skip: frozenset[str]) -> list[str]:
    shape = shapes.get(shape_name or "", {})
    lines = []
    required = set(shape.get("required", []))
    for member, ref in shape.get("members", {}).items():
        if member in skip:
            continue
        doc = strip_html(ref.get("documentation") or shapes.get(ref.get("shape", ""), {}).get("documentation"))
        kind = _type(shapes, ref)
        if arrow:
            lines.append(f"{member} -> ({kind})")
        else:
            lines.append(f"--{xform_name(member)} ({kind}){' [required]' if member in required else ''}")
        if doc:
            lines.append(doc)
        lines += _shape_lines(shapes, ref, "  ", 2)
    return lines


def render(service: str, op_name: str, track: Track, layout: str = "v2") -> tuple[str, str]:
    """The reference page of one operation in one track, and its one-line description.

    ``layout`` ``v2`` (the AWS CLI v2 reference) carries the global options section on every page;
    ``v1`` points to ``aws help`` instead, as the v1 help does.
    """
    model, shapes = track.model, track.model.get("shapes", {})
    op = model["operations"][op_name]
    command = xform_name(op_name)
    description = strip_html(op.get("documentation"))
    paginated = op_name in track.paginated
    skip = frozenset({"NextToken", "MaxResults", "Marker", "MaxItems"}) if paginated else frozenset()
    input_shape = op.get("input", {}).get("shape")
    options = _members(shapes, input_shape, False, skip)
    synopsis = [f"  {command}"]
    required = set(shapes.get(input_shape or "", {}).get("required", []))
    for member in shapes.get(input_shape or "", {}).get("members", {}):
        if member in skip:
            continue
        flag = f"--{xform_name(member)} <value>"
        synopsis.append(f"  {flag}" if member in required else f"  [{flag}]")
    synopsis += ["  [--cli-input-json | --cli-input-yaml]"]
    if paginated:
        synopsis += ["  [--starting-token <value>]", "  [--page-size <value>]", "  [--max-items <value>]"]
    synopsis += [
        "  [--generate-cli-skeleton <value>]",
        "  [--debug]",
        "  [--endpoint-url <value>]",
        "  [--output <value>]",
    ]
    full_name = model.get("metadata", {}).get("serviceFullName", service)
    parts = [
        f"aws {service} {command}",
        f"AWS CLI Command Reference, {full_name}, API version {track.api_version} (botocore {track.release})",
        "Description",
        description or "(no description)",
        f"See also: AWS API Documentation for {op_name}.",
        "Synopsis",
        *synopsis,
        "Options",
        *(options or ["None"]),
        INPUT_OPTIONS,
    ]
    if paginated:
        parts.append(PAGINATION.format(name=command))
    parts += [
        GLOBAL_OPTIONS if layout == "v2" else "See 'aws help' for descriptions of global parameters.",
        "Output",
        *(_members(shapes, op.get("output", {}).get("shape"), True, frozenset()) or ["None"]),
    ]
    return "\n".join(parts), first_sentence(description)


def old_release_wheel(version: str, wheel_dir: Path) -> Path:
    """The botocore wheel of ``version`` in ``wheel_dir``, fetched with ``pip download`` if missing."""
    wheel = wheel_dir / f"botocore-{version}-py3-none-any.whl"
    if not wheel.exists():
        wheel_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"botocore=={version}", "-d", str(wheel_dir)],
            check=True,
        )
    return wheel


def installed_release() -> Release:
    """The models of the installed botocore."""
    import botocore

    return Release(botocore.__version__, Path(os.path.dirname(botocore.__file__)) / "data")


def generate(
    releases: list[Release], entities: int | None, seed: int, max_tracks: int, layout: str = "v2"
) -> Iterator[dict[str, Any]]:
    """Pages of ``entities`` operations drawn with ``seed`` (None: all), up to ``max_tracks`` each.

    The first release is the newest; an operation's tracks are, in order: each release's newest
    API version, then older API versions of the first release, newest first.
    """
    tracks: dict[str, list[tuple[Release, str]]] = {}
    per_release = [(r, r.services()) for r in releases]
    for service in per_release[0][1]:
        order = [(r, versions[service][0]) for r, versions in per_release if versions.get(service)]
        order += [(releases[0], v) for v in per_release[0][1][service][1:]]
        tracks[service] = order
    cache: dict[tuple[str, str, str], Track] = {}

    def load(release: Release, service: str, api: str) -> Track:
        key = (release.version, service, api)
        if key not in cache:
            cache[key] = release.track(service, api)
        return cache[key]

    ops: list[tuple[str, str]] = []
    for service, order in tracks.items():
        release, api = order[0]
        ops += [(service, op) for op in sorted(load(release, service, api).model.get("operations", {}))]
    chosen = sorted(random.Random(seed).sample(ops, entities)) if entities is not None and entities < len(ops) else ops
    for service, op in chosen:
        pages = 0
        for release, api in tracks[service]:
            track = load(release, service, api)
            if op not in track.model.get("operations", {}):
                continue
            text, query = render(service, op, track, layout)
            command = xform_name(op)
            yield {
                "id": f"{service}.{command}@{track.release}/{api}",
                "title": f"aws {service} {command}",
                "text": text,
                "source": SOURCE,
                "entity": f"{service} {command}",
                "query": query,
                "release": track.release,
                "api_version": api,
            }
            pages += 1
            if pages == max_tracks:
                break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/templated.jsonl"))
    parser.add_argument("--entities", type=int, default=8000, help="operations drawn (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tracks", type=int, default=4)
    parser.add_argument("--old-release", default=DEFAULT_OLD_RELEASE, help="older botocore release, second track")
    parser.add_argument("--no-old-release", action="store_true", help="only the installed botocore")
    parser.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR)
    parser.add_argument("--layout", choices=("v2", "v1"), default="v2", help="v2: global options on every page")
    args = parser.parse_args()
    releases = [installed_release()]
    if not args.no_old_release:
        releases.append(Release(args.old_release, old_release_wheel(args.old_release, args.wheel_dir)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    entities: set[str] = set()
    with open(args.out, "wb") as out:
        for doc in generate(releases, args.entities or None, args.seed, args.max_tracks, args.layout):
            out.write(orjson.dumps(doc) + b"\n")
            n += 1
            entities.add(doc["entity"])
    print(
        f"wrote {n:,} pages of {len(entities):,} operations to {args.out} "
        f"(botocore {', '.join(r.version for r in releases)})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
