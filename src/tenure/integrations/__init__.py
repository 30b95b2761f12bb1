"""Agent frameworks' tools that are tenure jobs: `tenure.integrations.openai_agents` (extra
`tenure[openai-agents]`) and `tenure.integrations.langgraph` (extra `tenure[langgraph]`), on
the one way a tool call becomes a job (`tenure.integrations.jobcalls`)."""
