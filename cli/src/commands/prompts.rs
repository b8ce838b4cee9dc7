//! The built-in prompt set of `entrobatch run --prompts` (after the MLX port's
//! `mlx_entropix.prompts`): short questions where a confident wrong answer is easy, the
//! entropix demo prompt first.

pub const BUILTIN_PROMPTS: &[&str] = &[
    "Which number is bigger, 9.9 or 9.11?",
    "How many r's are in the word strawberry?",
    "What is the capital of Australia?",
    "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. How much does the ball cost?",
    "If it takes 5 machines 5 minutes to make 5 widgets, how long would it take 100 machines to make 100 widgets?",
    "Write a haiku about the sea.",
    "Explain in one paragraph why the sky is blue.",
    "List three prime numbers greater than 20.",
];
