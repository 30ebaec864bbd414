//! `chorus mcp` through an MCP client (issue 55).
