"""The vector store of LangGraph's adaptive-RAG tutorial — Lilian Weng's posts
on agents, prompt engineering and adversarial attacks on LLMs — as an MCP
server over stdio on the official Python SDK. A stand-in: passages ranked by
the words they share with the query, not by embeddings; a real app would put
its vector store behind the same `retrieve` tool
(graphs/adaptive_rag.yaml).
"""

import re

from mcp.server.mcpserver import MCPServer

server = MCPServer("blog")

BASE = "https://lilianweng.github.io/posts"
PASSAGES = [
    ("LLM Powered Autonomous Agents", f"{BASE}/2023-06-23-agent/",
     "An agent's memory: short-term memory is in-context learning; long-term "
     "memory keeps information over extended periods in an external vector store."),
    ("LLM Powered Autonomous Agents", f"{BASE}/2023-06-23-agent/",
     "Planning: task decomposition with chain of thought, tree of thoughts, "
     "and self-reflection with ReAct and Reflexion."),
    ("Prompt Engineering", f"{BASE}/2023-03-15-prompt-engineering/",
     "Few-shot prompting gives demonstrations of the task; chain-of-thought "
     "prompting asks for reasoning steps before the answer."),
    ("Adversarial Attacks on LLMs", f"{BASE}/2023-10-25-adv-attack-llm/",
     "Jailbreak prompts and adversarial suffixes trigger unsafe outputs from "
     "aligned language models."),
]


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


@server.tool()
def retrieve(query: str) -> dict:
    """The two passages of the blog that share the most words with the query:
    {documents: [{title, url, snippet}]}, the shape web_search returns."""
    asked = words(query)
    ranked = sorted(PASSAGES, key=lambda p: -len(asked & words(p[2])))
    return {
        "documents": [
            {"title": t, "url": u, "snippet": s} for t, u, s in ranked[:2]
        ]
    }


if __name__ == "__main__":
    server.run()  # stdio
