"""The interface for coding agents: an MCP server (``traceanalyze mcp``) over the report's digest, with drill-down
tools and read-only SQL, every answer small, paged and stating its unit and scope.

``workspace`` holds the open traces and the folders they may come from, ``answers`` the budget and paging every
answer keeps, ``sql`` the read-only DuckDB query, ``tools`` the tools as plain functions, ``server`` their MCP
wiring (the optional ``mcp`` SDK: ``pip install 'traceanalyzer[mcp]'``) and ``cli`` the command.
"""
