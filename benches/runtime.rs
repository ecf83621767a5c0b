//! Criterion benchmarks of the runtime (issue targets in parentheses):
//! per-node step overhead (≤ 1 µs), 1,000-way fan-out and join (≤ 2 ms),
//! compiling 100 / 1,000-node graphs (≤ 0.5 ms for 100), and the chat
//! graph's RESEARCH path with all events consumed (≤ 100 µs with 50 tokens
//! per call, ≤ 20 µs with none). Single-threaded runtime: wall time is CPU
//! time. `cargo bench --bench figures` prints the same targets as a table.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod support;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use support::*;

fn node_steps(c: &mut Criterion) {
    let rt = current_thread();
    let graph = compile(&chain_yaml(1000));
    let services = services(research_model(0));
    let mut g = c.benchmark_group("chain_1000_noop_nodes");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("events_consumed", |b| {
        b.iter(|| rt.block_on(run_consumed(graph.clone(), services.clone(), json!({}))));
    });
    g.finish();
}

fn fan_out(c: &mut Criterion) {
    let rt = current_thread();
    let graph = compile(&fanout_yaml(1000));
    let services = services(research_model(0));
    c.bench_function("fan_out_1000_and_join", |b| {
        b.iter(|| rt.block_on(run_consumed(graph.clone(), services.clone(), json!({}))));
    });
}

fn compile_graphs(c: &mut Criterion) {
    let mut g = c.benchmark_group("compile");
    for n in [100, 1000] {
        let fixture = CompileFixture::new();
        let file = fixture.load(&mixed_yaml(n));
        g.bench_with_input(BenchmarkId::new("validate_and_build", n), &file, |b, f| {
            b.iter(|| fixture.compile(f))
        });
        let yaml = mixed_yaml(n);
        g.bench_with_input(BenchmarkId::new("load_yaml", n), &yaml, |b, y| {
            b.iter(|| fixture.load(y))
        });
    }
    g.finish();
}

fn research_path(c: &mut Criterion) {
    let rt = current_thread();
    let graph = chat_graph();
    let input = research_input();
    let mut g = c.benchmark_group("chat_research_path");
    for tokens in [50, 0] {
        let services = services(research_model(tokens));
        g.bench_with_input(
            BenchmarkId::new("tokens_per_call", tokens),
            &tokens,
            |b, _| {
                b.iter(|| {
                    rt.block_on(run_consumed(graph.clone(), services.clone(), input.clone()))
                });
            },
        );
    }
    g.finish();
}

criterion_group!(benches, node_steps, fan_out, compile_graphs, research_path);
criterion_main!(benches);
