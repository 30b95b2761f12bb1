"""Agent frameworks' tools that are tenure jobs: `tenure.integrations.openai_agents` (extra
`tenure[openai-agents]`), `tenure.integrations.langgraph` (extra `tenure[langgraph]`),
`tenure.integrations.pydantic_ai` (extra `tenure[pydantic-ai]`) and
`tenure.integrations.fastmcp` (extra `tenure[fastmcp]`), on the one way a tool call becomes a
job (`tenure.integrations.jobcalls`)."""
