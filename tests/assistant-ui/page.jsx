// A small assistant-ui app on stategraph's AI SDK stream, as a user would
// write one: @assistant-ui/react's primitives over useChatRuntime from
// @assistant-ui/react-ai-sdk (AssistantChatTransport, POST /api/chat with
// `graph` in the body). The chat id comes from `?chat=`; on load the page
// reads the chat's stored messages (GET /api/chat/{id}) and starts the
// runtime from them, so a reload shows the history. Our data parts render
// through assistant-ui's data part components: `data-thinking` and
// `data-followups` by name.
//
// Bundled by build.mjs (esbuild) into dist/page.js; served to Chromium by
// assistant-ui.test.mjs.

import React, { useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';
import {
  AssistantRuntimeProvider,
  ComposerPrimitive,
  MessagePrimitive,
  ThreadPrimitive,
} from '@assistant-ui/react';
import { AssistantChatTransport, useChatRuntime } from '@assistant-ui/react-ai-sdk';

const params = new URLSearchParams(location.search);
const CHAT_ID = params.get('chat') || 'aui-chat';
const GRAPH = params.get('graph') || 'chat';

function Thinking({ data }) {
  return (
    <div data-testid="aui-thinking" data-node={data?.node} data-status={data?.status}>
      <b>{data?.node}</b>: {data?.text}
    </div>
  );
}

function Followups({ data }) {
  const questions = Array.isArray(data?.questions) ? data.questions : [];
  return (
    <ul data-testid="aui-followups">
      {questions.map((q) => <li key={q} data-testid="aui-followup">{q}</li>)}
    </ul>
  );
}

const PARTS = {
  data: { by_name: { thinking: Thinking, followups: Followups }, Fallback: () => null },
};

function UserMessage() {
  return (
    <MessagePrimitive.Root data-testid="aui-message" data-role="user">
      <MessagePrimitive.Parts />
    </MessagePrimitive.Root>
  );
}

function AssistantMessage() {
  return (
    <MessagePrimitive.Root data-testid="aui-message" data-role="assistant">
      <MessagePrimitive.Parts components={PARTS} />
    </MessagePrimitive.Root>
  );
}

function Chat({ initial }) {
  const runtime = useChatRuntime({
    id: CHAT_ID,
    messages: initial,
    transport: new AssistantChatTransport({
      api: '/api/chat',
      body: { graph: GRAPH },
      // One chat id across reloads, as the server stores the chat under it.
      prepareSendMessagesRequest: ({ body, messages, trigger, messageId }) => ({
        body: { ...body, id: CHAT_ID, messages, trigger, messageId },
      }),
    }),
  });
  return (
    <AssistantRuntimeProvider runtime={runtime}>
      <ThreadPrimitive.Root data-testid="aui-thread">
        <ThreadPrimitive.Viewport>
          <ThreadPrimitive.Messages components={{ UserMessage, AssistantMessage }} />
        </ThreadPrimitive.Viewport>
        <ThreadPrimitive.If running>
          <p data-testid="aui-running">running</p>
        </ThreadPrimitive.If>
        <ComposerPrimitive.Root>
          <ComposerPrimitive.Input data-testid="aui-input" aria-label="Message" />
          <ComposerPrimitive.Send data-testid="aui-send">Send</ComposerPrimitive.Send>
        </ComposerPrimitive.Root>
      </ThreadPrimitive.Root>
    </AssistantRuntimeProvider>
  );
}

function App() {
  const [initial, setInitial] = useState(null);
  useEffect(() => {
    fetch(`/api/chat/${encodeURIComponent(CHAT_ID)}`)
      .then((r) => (r.ok ? r.json() : { messages: [] }))
      .then((c) => setInitial(c.messages || []))
      .catch(() => setInitial([]));
  }, []);
  if (!initial) return <p>Loading…</p>;
  return (
    <div data-testid="aui-ready" data-history={initial.length}>
      <Chat initial={initial} />
    </div>
  );
}

createRoot(document.getElementById('root')).render(<App />);
