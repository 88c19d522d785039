"""FastMCP's default client against one MCP server, for the interop tests.

    python fastmcp_probe.py PLANS.json

PLANS is a list of plans, probed one after the other (one Python start for
all: FastMCP takes seconds to import). Each plan names the server (`{"url": ...}` or `{"command": ..., "args": [...]}`)
and what to ask of it: `tools` (a list of [name, arguments] to call),
`prompts` ([name, arguments] to get), `resources` (URIs to read). The
client is FastMCP's `Client` with its defaults (mode "auto": `server/discover`
at the newest revision it speaks, the legacy handshake for servers that do not
answer it). Prints one JSON report on stdout: the negotiated revision, the
names listed (tools, prompts, resources) and what each call, prompt and read
returned, so that a test can compare a server reached directly with the same
server through mcptask; one report per plan, as a JSON list. Exits 1 with
the error (and the plan it failed on) on stderr if anything fails.
"""

import asyncio
import json
import sys

from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport


def dump(model):
    """A pydantic model (or a list of them) as plain JSON data."""
    if isinstance(model, list):
        return [dump(m) for m in model]
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


async def probe(plan):
    if "url" in plan:
        transport = StreamableHttpTransport(plan["url"], headers=plan.get("headers"))
    else:
        transport = StdioTransport(plan["command"], plan.get("args", []), env=plan.get("env"))
    report = {}
    async with Client(transport) as client:
        report["protocol"] = client.protocol_version
        # The calls first, the listings after: a front lists its upstreams in
        # the background and answers a list made in its first moments with
        # the servers that answered by then (announcing the others with
        # list_changed, which this one-shot probe does not wait for), while
        # a call of a server still starting waits for it.
        report["calls"] = []
        for name, arguments in plan.get("tools", []):
            result = await client.call_tool_mcp(name, arguments)
            report["calls"].append({"tool": name, "isError": bool(result.is_error), "content": dump(result.content)})
        report["tools"] = sorted(t.name for t in await client.list_tools())
        # Lists only what the server declares (a server without prompts
        # answers "method not found", as it may).
        capabilities = client.server_capabilities
        report["prompts"] = sorted(p.name for p in await client.list_prompts()) if capabilities.prompts else []
        report["prompt_results"] = []
        for name, arguments in plan.get("prompts", []):
            got = await client.get_prompt(name, arguments)
            report["prompt_results"].append({"prompt": name, "messages": dump(got.messages)})
        report["resources"] = sorted(str(r.uri) for r in await client.list_resources()) if capabilities.resources else []
        report["reads"] = []
        for uri in plan.get("resources", []):
            contents = await client.read_resource(uri)
            report["reads"].append({"uri": uri, "contents": dump(contents)})
    return report


async def probe_all(plans):
    reports = []
    for n, plan in enumerate(plans):
        try:
            reports.append(await probe(plan))
        except BaseException as e:  # noqa: BLE001 - the test reads the reason
            raise SystemExit(f"fastmcp_probe: plan {n} ({plan.get('url') or plan.get('command')}): {type(e).__name__}: {e}")
    return reports


def main():
    with open(sys.argv[1]) as f:
        plans = json.load(f)
    json.dump(asyncio.run(probe_all(plans)), sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
