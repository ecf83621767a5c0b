// A small React page on LangGraph's `useStream` (the chat front ends built on
// LangGraph use this hook), pointed at `stategraph serve` by its query:
// ?api=URL&key=KEY. usestream.test.mjs bundles it and drives it in Chromium.
import React, { useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";

const params = new URLSearchParams(location.search);

function text(m) {
  return typeof m.content === "string" ? m.content : m.content.map((b) => b.text ?? "").join("");
}

function Chat() {
  const [threadId, setThreadId] = useState(null);
  const stream = useStream({
    apiUrl: params.get("api"),
    apiKey: params.get("key"),
    assistantId: "agent",
    messagesKey: "messages",
    threadId,
    onThreadId: setThreadId,
  });
  const [draft, setDraft] = useState("");
  const send = () => {
    stream.submit({ messages: [{ type: "human", content: draft }] });
    setDraft("");
  };
  return (
    <main>
      <ol id="messages">
        {stream.messages.map((m) => (
          <li key={m.id} data-type={m.type}>{text(m)}</li>
        ))}
      </ol>
      {stream.interrupt && (
        <p id="interrupt">{stream.interrupt.value.question}</p>
      )}
      <p id="status">{stream.isLoading ? "loading" : "idle"}</p>
      <p id="thread">{threadId ?? ""}</p>
      {stream.error && <p id="error">{String(stream.error)}</p>}
      <input id="draft" value={draft} onChange={(e) => setDraft(e.target.value)} />
      <button id="send" onClick={send}>send</button>
      <button id="resume" onClick={() => stream.submit(undefined, { command: { resume: draft } })}>answer</button>
      <button id="stop" onClick={() => stream.stop()}>stop</button>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
