"""A short agent session with `traceanalyze mcp` over stdio, printed as a transcript (the README's is this output).

Run from the repository root: python examples/mcp_session.py
"""

from __future__ import annotations

import json
import sys
import textwrap

import anyio
from mcp import Client, StdioServerParameters

SERVER = StdioServerParameters(
    command=sys.executable,
    args=["-c", "import sys; from traceanalyzer.cli import main; sys.exit(main())", "mcp", "--allow", "sample_traces"],
)
CALLS = [
    ("open_trace", {"path": "sample_traces/unfused_ops.json.gz", "budget_tokens": 800}),
    ("finding", {"handle": "t1", "id": "F1"}),
    ("section", {"handle": "t1", "id": "fusion.opportunities"}),
    (
        "query",
        {
            "handle": "t1",
            "sql": "SELECT name, count(*) AS n, sum(dur) AS ns FROM events "
            "WHERE kind = 'kernel' GROUP BY name ORDER BY ns DESC LIMIT 3",
        },
    ),
    ("compare", {"base": "sample_traces/fused_ops.json.gz", "candidate": "t1", "threshold_pct": 5}),
    ("open_trace", {"path": "/etc/passwd"}),
]
SHOWN = 420
"""Characters of each answer the transcript shows."""


async def main() -> None:
    async with Client(SERVER) as client:
        print(f"> tools: {', '.join(t.name for t in (await client.list_tools()).tools)}")
        for tool, arguments in CALLS:
            result = await client.call_tool(tool, arguments)
            text = result.content[0].text
            print(f"> {tool}({json.dumps(arguments)})")
            if result.is_error:
                print(f"  error: {text}")
                continue
            answer = json.loads(text)
            shown = answer.pop("digest", None) or text
            print(f"  [{answer['answer_tokens']:,} of {answer['budget_tokens']:,} tokens]")
            print(textwrap.indent(shown[:SHOWN] + (" …" if len(shown) > SHOWN else ""), "  "))


if __name__ == "__main__":
    anyio.run(main)
