//! Today's providers, as their published rules describe them: local
//! emulators of OpenAI (classic and reasoning families), Azure OpenAI and
//! Anthropic validate every request the real client makes and answer
//! violations exactly as the provider does; the client, the Anthropic
//! client, the strict-schema transform and every shipped graph are run
//! against them.

mod anthropic;
mod anthropic_rules;
mod conformance;
mod cost;
mod emulator;
mod families;
mod instance;
mod openai_rules;
mod strict_props;
mod strict_tools;
