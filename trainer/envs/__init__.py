"""Text environments for the agentic pipeline (see trainer.envs.base for the interface).

base        Env (reset(seed) -> observation; step(reply) -> observation, reward, done, info), DONE_REASONS
actions     reply -> action parsing (answer tags or plain), shared tag patterns
grid        FrozenLake and Sokoban, seeded layouts, text rendering
calculator  arithmetic with a calculator tool and a safe AST evaluator (never eval)
tools       Qwen/Hermes <tool_call> parsing, registered tools (calculator, lookup), the tool_use environment
registry    environments and ROLL env managers by name (never imported from a config)
manager     env groups, group_size, tags, rounds of episodes and their seeds, turn limits
"""
