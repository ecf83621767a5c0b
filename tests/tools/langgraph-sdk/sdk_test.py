"""LangGraph's own Python SDK (langgraph-sdk, pinned by requirements.txt)
against `stategraph serve` serving examples/langgraph_api
(tests/integration/server_api/langgraph_api.rs starts it).

    python sdk_test.py URL KEY_A KEY_B

Prints `ok   CASE` or `FAIL CASE: why` per case; exits 1 on any failure.
"""

import asyncio
import sys
import traceback

import httpx
from langgraph_sdk import get_client

URL, KEY_A, KEY_B = sys.argv[1:4]
# uuid5(NAMESPACE_GRAPH, "agent"), as langgraph_api/graph.py names a graph's assistant.
AGENT = "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
failed = 0


def human(text):
    return {"messages": [{"type": "human", "content": text}]}


def last_values(parts):
    return [p.data for p in parts if p.event == "values"][-1]


async def check(name, fn):
    global failed
    try:
        await fn()
        print(f"ok   {name}", flush=True)
    except Exception:  # noqa: BLE001 - every failure is reported
        failed += 1
        print(f"FAIL {name}: {traceback.format_exc()}", flush=True)


async def status(code, coro):
    try:
        await coro
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == code, f"expected {code}, got {e.response.status_code}"
        return
    raise AssertionError(f"expected {code}")


async def collect(it):
    return [p async for p in it]


async def main():
    a = get_client(url=URL, api_key=KEY_A)
    b = get_client(url=URL, api_key=KEY_B)
    state = {}

    async def assistants():
        found = await a.assistants.search(graph_id="agent")
        assert [x["assistant_id"] for x in found] == [AGENT], found
        assert (await a.assistants.get("agent"))["assistant_id"] == AGENT
        graph = await a.assistants.get_graph(AGENT)
        ids = [n["id"] for n in graph["nodes"]]
        assert ids[0] == "__start__" and ids[-1] == "__end__", ids
        schemas = await a.assistants.get_schemas(AGENT)
        assert schemas["state_schema"]["properties"]["messages"]["type"] == "array"

    async def threads():
        t = await a.threads.create(metadata={"tags": ["sdk-py"]})
        state["thread"] = t["thread_id"]
        assert t["status"] == "idle"
        found = await a.threads.search(metadata={"tags": ["sdk-py"]})
        assert [x["thread_id"] for x in found] == [t["thread_id"]], found
        await a.threads.update(t["thread_id"], metadata={"topic": "py"})
        assert (await a.threads.get(t["thread_id"]))["metadata"] == {"tags": ["sdk-py"], "topic": "py"}

    async def stream_modes():
        tid = state["thread"]
        parts = await collect(
            a.runs.stream(tid, "agent", input=human("hello from python"),
                          stream_mode=["values", "updates", "messages-tuple", "custom", "debug"])
        )
        assert parts[0].event == "metadata", parts[0]
        state["run"] = parts[0].data["run_id"]
        events = {p.event for p in parts}
        assert {"values", "updates", "messages", "debug"} <= events, events
        tokens = [p.data for p in parts if p.event == "messages"]
        chunk, meta = tokens[0]
        assert chunk["type"] == "AIMessageChunk" and meta["langgraph_node"] == "reply"
        final = last_values(parts)
        assert final["messages"][-1]["content"] == "".join(t[0]["content"] for t in tokens)

    async def events_mode():
        # astream_events (v2) events, as the SDK's EventsStreamEvent types them.
        parts = await collect(a.runs.stream(None, "agent", input=human("events from python"), stream_mode="events"))
        assert {p.event for p in parts} == {"metadata", "events"}, {p.event for p in parts}
        evs = [p.data for p in parts if p.event == "events"]
        root = parts[0].data["run_id"]
        assert (evs[0]["event"], evs[0]["name"], evs[0]["run_id"]) == ("on_chain_start", "LangGraph", root)
        assert (evs[-1]["event"], evs[-1]["name"]) == ("on_chain_end", "LangGraph")
        nodes = [e["name"] for e in evs if e["event"] == "on_chain_start" and e["name"] != "LangGraph"]
        assert nodes == ["triage", "reply"], nodes
        tokens = [e for e in evs if e["event"] == "on_chat_model_stream"]
        assert tokens and tokens[0]["metadata"]["langgraph_node"] == "reply"
        text = "".join(t["data"]["chunk"]["content"] for t in tokens)
        assert evs[-1]["data"]["output"]["messages"][-1]["content"] == text

    async def state_history():
        tid = state["thread"]
        s = await a.threads.get_state(tid)
        assert [m["type"] for m in s["values"]["messages"]] == ["human", "ai"]
        history = await a.threads.get_history(tid, limit=5)
        assert history[0]["checkpoint"]["checkpoint_id"] == s["checkpoint"]["checkpoint_id"]
        assert history[0]["parent_checkpoint"]["checkpoint_id"] == history[1]["checkpoint"]["checkpoint_id"]

    async def second_turn():
        tid = state["thread"]
        values = await a.runs.wait(tid, "agent", input=human("second python turn"))
        assert [m["type"] for m in values["messages"]] == ["human", "ai", "human", "ai"]
        runs = await a.runs.list(tid)
        assert len(runs) == 2 and all(r["status"] == "success" for r in runs), runs

    async def interrupt_resume():
        t = await a.threads.create()
        parts = await collect(a.runs.stream(t["thread_id"], "agent", input=human("approve this please")))
        [paused] = [p.data for p in parts if p.event == "values" and "__interrupt__" in p.data]
        assert paused["__interrupt__"][0]["value"]["type"] == "question"
        assert (await a.threads.get(t["thread_id"]))["status"] == "interrupted"
        values = await a.runs.wait(t["thread_id"], "agent", command={"resume": "python says yes"})
        assert "python says yes" in values["messages"][-1]["content"]

    async def breakpoints():
        # interrupt_before / interrupt_after: static interrupts, continued with no input.
        t = await a.threads.create()
        await a.runs.wait(t["thread_id"], "agent", input=human("python hello"), interrupt_before=["reply"])
        st = await a.threads.get_state(t["thread_id"])
        assert st["next"] == ["reply"], st["next"]
        assert not any(m["type"] == "ai" for m in st["values"]["messages"])
        values = await a.runs.wait(t["thread_id"], "agent", input=None)
        assert "python hello" in values["messages"][-1]["content"]
        assert (await a.threads.get(t["thread_id"]))["status"] == "idle"
        await status(422, a.runs.wait(t["thread_id"], "agent", input=human("x"), interrupt_after=["nope"]))

    async def update_state():
        # update_state: a new checkpoint (parent: the one it edits), which the next run starts from.
        tid = (await a.threads.create())["thread_id"]
        await a.runs.wait(tid, "agent", input=human("first"))
        before = await a.threads.get_state(tid)
        added = {"type": "human", "content": "added by update", "id": "upd-1"}
        r = await a.threads.update_state(tid, {"decision": "edited", "messages": [added]}, as_node="reply")
        cid = r["checkpoint"]["checkpoint_id"]
        assert r["checkpoint"]["thread_id"] == tid and cid != before["checkpoint"]["checkpoint_id"]
        s = await a.threads.get_state(tid)
        assert s["checkpoint"]["checkpoint_id"] == cid and s["next"] == [], s
        assert s["values"]["decision"] == "edited"
        assert [m["type"] for m in s["values"]["messages"]] == ["human", "ai", "human"], s["values"]
        assert s["parent_checkpoint"]["checkpoint_id"] == before["checkpoint"]["checkpoint_id"]
        history = await a.threads.get_history(tid, limit=3)
        assert history[0]["checkpoint"]["checkpoint_id"] == cid
        assert history[1]["checkpoint"]["checkpoint_id"] == before["checkpoint"]["checkpoint_id"]
        assert history[0]["parent_checkpoint"]["checkpoint_id"] == history[1]["checkpoint"]["checkpoint_id"]
        assert (await a.threads.get(tid))["status"] == "idle"
        values = await a.runs.wait(tid, "agent", input=human("after the edit"))
        assert values["decision"] == "edited", values
        humans = [m["content"] for m in values["messages"] if m["type"] == "human"]
        assert humans == ["first", "added by update", "after the edit"], humans
        await status(422, a.threads.update_state(tid, {"nope": 1}))
        await status(422, a.threads.update_state(tid, {"rounds": "many"}))
        await status(422, a.threads.update_state(tid, {"decision": "x"}, as_node="nope"))
        assert (await a.threads.get_state(tid))["values"]["decision"] == "edited"
        # as_node on a thread that is not paused: `next` is where that node routes the edited state.
        await a.threads.update_state(tid, {"query": "please approve"}, as_node="triage")
        assert (await a.threads.get_state(tid))["next"] == ["ask"]
        await a.threads.update_state(tid, {"query": "just hello"}, as_node="triage")
        assert (await a.threads.get_state(tid))["next"] == ["reply"], "routed again, waiting or not"
        await a.runs.wait(tid, "agent", input=None)
        st = await a.threads.get_state(tid)
        assert st["next"] == [] and st["values"]["messages"][-1]["type"] == "ai", st

    async def update_paused():
        # update_state on a thread paused at a breakpoint: it stays paused, and goes on with the edit.
        tid = (await a.threads.create())["thread_id"]
        await a.runs.wait(tid, "agent", input=human("python paused"), interrupt_before=["reply"])
        await a.threads.update_state(tid, {"messages": [{"type": "human", "content": "edited while paused", "id": "p-1"}]})
        st = await a.threads.get_state(tid)
        assert st["next"] == ["reply"], st["next"]
        assert (await a.threads.get(tid))["status"] == "interrupted"
        values = await a.runs.wait(tid, "agent", input=None)
        assert values["messages"][-1]["type"] == "ai"
        assert "edited while paused" in values["messages"][-1]["content"], values["messages"][-1]
        assert (await a.threads.get(tid))["status"] == "idle"

    async def goto():
        # command.goto: the run starts at the node named (triage does not run).
        tid = (await a.threads.create())["thread_id"]
        await a.runs.wait(tid, "agent", input=human("hi before goto"))
        parts = await collect(a.runs.stream(tid, "agent", input=human("straight to reply"),
                                            command={"goto": "reply"}, stream_mode="updates"))
        nodes = [k for p in parts if p.event == "updates" for k in p.data]
        assert nodes == ["reply"], nodes
        final = await a.threads.get_state(tid)
        assert final["values"]["messages"][-1]["type"] == "ai"
        assert "straight to reply" in final["values"]["messages"][-1]["content"]
        await status(422, a.runs.wait(tid, "agent", command={"goto": "nope"}))

    async def empty_thread():
        # update_state and command.goto before any run, as LangGraph accepts them.
        tid = (await a.threads.create(graph_id="agent"))["thread_id"]
        assert (await a.threads.get(tid))["metadata"]["graph_id"] == "agent"
        r = await a.threads.update_state(tid, {"decision": "preset"})
        s = await a.threads.get_state(tid)
        assert s["checkpoint"]["checkpoint_id"] == r["checkpoint"]["checkpoint_id"], s
        assert s["values"]["decision"] == "preset" and s["next"] == [], s
        assert s["parent_checkpoint"] is None, s["parent_checkpoint"]
        await a.threads.update_state(tid, {"query": "please approve"}, as_node="triage")
        assert (await a.threads.get_state(tid))["next"] == ["ask"]
        bare = (await a.threads.create())["thread_id"]
        await status(422, a.threads.update_state(bare, {"decision": "x"}))
        parts = await collect(a.runs.stream(bare, "agent", input=human("goto first"),
                                            command={"goto": "reply"}, stream_mode="updates"))
        nodes = [k for p in parts if p.event == "updates" for k in p.data]
        assert nodes == ["reply"], nodes
        final = (await a.threads.get_state(bare))["values"]["messages"]
        assert [m["type"] for m in final] == ["human", "ai"], final
        assert "goto first" in final[-1]["content"], final[-1]
        runs = await a.runs.list(bare)
        assert len(runs) == 1 and runs[0]["status"] == "success", runs

    async def from_checkpoint():
        # checkpoint_id: the thread goes on from that point.
        tid = (await a.threads.create())["thread_id"]
        await a.runs.wait(tid, "agent", input=human("one"))
        first = await a.threads.get_state(tid)
        await a.runs.wait(tid, "agent", input=human("two"))
        values = await a.runs.wait(tid, "agent", input=human("three"),
                                   checkpoint_id=first["checkpoint"]["checkpoint_id"])
        humans = [m["content"] for m in values["messages"] if m["type"] == "human"]
        assert humans == ["one", "three"], humans
        s = await a.threads.get_state(tid)
        history = await a.threads.get_history(tid, limit=50)
        first_of_run = [h for h in history if h["metadata"]["run_id"] == s["metadata"]["run_id"]][-1]
        assert first_of_run["parent_checkpoint"]["checkpoint_id"] == first["checkpoint"]["checkpoint_id"]
        # Without input: from the checkpoint's own next step (after triage: reply runs again).
        mid = [h for h in history if h["next"] == ["reply"]][-1]
        parts = await collect(a.runs.stream(tid, "agent", input=None, stream_mode="updates",
                                            checkpoint={"checkpoint_id": mid["checkpoint"]["checkpoint_id"]}))
        nodes = [k for p in parts if p.event == "updates" for k in p.data]
        assert nodes == ["reply"], nodes
        bogus = first["checkpoint"]["checkpoint_id"][:-6] + "999999"
        await status(404, a.runs.wait(tid, "agent", input=human("x"), checkpoint_id=bogus))

    async def rejoin():
        t = await a.threads.create()
        seen = []
        stream = a.runs.stream(t["thread_id"], "agent", input=human("slow from python"),
                               stream_mode=["values", "messages-tuple"], stream_resumable=True)
        async for p in stream:
            seen.append(p)
            if sum(1 for s in seen if s.event == "messages") == 8:
                break
        await stream.aclose()
        run_id = seen[0].data["run_id"]
        rest = await collect(a.runs.join_stream(t["thread_id"], run_id, last_event_id=seen[-1].id,
                                                stream_mode=["values", "messages-tuple"]))
        tokens = "".join(p.data[0]["content"] for p in seen + rest if p.event == "messages")
        final = last_values(rest)
        replies = "".join(m["content"] for m in final["messages"] if m["type"] == "ai")
        assert tokens == replies, "the two streams together are every token"

    async def cancel():
        t = await a.threads.create()
        run = await a.runs.create(t["thread_id"], "agent", input=human("slow, to cancel"))
        await asyncio.sleep(0.3)
        await a.runs.cancel(t["thread_id"], run["run_id"])
        await a.runs.join(t["thread_id"], run["run_id"])
        assert (await a.runs.get(t["thread_id"], run["run_id"]))["status"] == "interrupted"

    async def enqueue():
        # langgraph_api/api/runs.py: a run on a busy thread with enqueue is
        # created pending and returned at once; runs start in order.
        t = (await a.threads.create())["thread_id"]
        busy = await a.runs.create(t, "agent", input=human("slow, then a queue"))
        queued = await a.runs.create(t, "agent", input=human("after the slow one"), multitask_strategy="enqueue")
        assert queued["status"] == "pending", queued
        dropped = await a.runs.create(t, "agent", input=human("never run"), multitask_strategy="enqueue")
        assert dropped["status"] == "pending", dropped
        assert any(r["run_id"] == queued["run_id"] and r["status"] == "pending" for r in await a.runs.list(t))
        await a.runs.cancel(t, dropped["run_id"])
        values = await a.runs.join(t, queued["run_id"])
        assert (await a.runs.get(t, busy["run_id"]))["status"] == "success"
        assert (await a.runs.get(t, queued["run_id"]))["status"] == "success"
        assert (await a.runs.get(t, dropped["run_id"]))["status"] != "success"
        humans = [m["content"] for m in values["messages"] if m["type"] == "human"]
        assert humans == ["slow, then a queue", "after the slow one"], humans

    async def not_found():
        await status(404, a.threads.get("00000000-0000-4000-8000-000000000000"))
        await status(404, a.assistants.get("no-such-graph"))
        await status(404, a.runs.get(state["thread"], "00000000-0000-4000-8000-000000000000"))

    async def isolation():
        await status(404, b.threads.get(state["thread"]))
        await status(404, b.threads.get_state(state["thread"]))
        await status(404, b.runs.get(state["thread"], state["run"]))
        assert await b.threads.search(metadata={"tags": ["sdk-py"]}) == []

    for name, fn in [
        ("assistants", assistants),
        ("threads", threads),
        ("stream every mode", stream_modes),
        ("events mode", events_mode),
        ("state and history", state_history),
        ("second turn", second_turn),
        ("interrupt and resume", interrupt_resume),
        ("interrupt_before and interrupt_after", breakpoints),
        ("update_state", update_state),
        ("update_state while paused", update_paused),
        ("command.goto", goto),
        ("update_state and goto before any run", empty_thread),
        ("run from a checkpoint", from_checkpoint),
        ("rejoin with the last event id", rejoin),
        ("cancel", cancel),
        ("multitask_strategy enqueue", enqueue),
        ("404s", not_found),
        ("another key sees nothing", isolation),
    ]:
        await check(name, fn)


asyncio.run(main())
sys.exit(1 if failed else 0)
