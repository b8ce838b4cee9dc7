//! `entrobatch eval` without the real data or models: each task runs 2 items through the
//! engine with a tiny random model (every strategy, one batched job each), and the graders
//! are checked on answers known to be right and wrong. Fixtures: eval/tests/fixtures/eval/. The `entrobatch eval`
//! command itself is tested in cli/tests/eval_cli.rs.

use entrobatch_testkit::common;

use std::time::Duration;

use common::{eval_fixtures, tiny_eval_model};
use entrobatch::Decoding;
use entrobatch_eval::bootstrap::accuracy_interval;
use entrobatch_eval::grading::{extract_code, extract_final_number, extract_letter, numbers};
use entrobatch_eval::runner::Progress;
use entrobatch_eval::sandbox::network_isolated;
use entrobatch_eval::tasks::humaneval::{grade_completion, HumanEval};
use entrobatch_eval::{load_task, parse_strategies, run_strategy, LoadOptions, RunOptions, TaskKind};

fn load_options(limit: usize) -> LoadOptions {
    LoadOptions { data_dir: eval_fixtures(), limit: Some(limit), seed: 7, exec_timeout: Duration::from_secs(3) }
}

#[test]
fn each_task_runs_two_items_per_strategy() {
    let model = tiny_eval_model("eval-smoke");
    let specs = parse_strategies("plain,entropix,mti:tau=0.5:w=1.5,branch:tau=0:lookahead=2:stop_at_newline=false")
        .expect("strategies");
    let options = RunOptions {
        model,
        max_tokens: Some(6),
        temperature: 0.0,
        seed: 1,
        max_num_seqs: 8,
        chunk: 256,
        resume_dir: None,
    };
    for kind in [TaskKind::Humaneval, TaskKind::GsmSymbolic, TaskKind::Mmlu] {
        let task = load_task(kind, &load_options(2)).expect("load task");
        assert_eq!(task.items().len(), 2, "{kind:?}");
        for spec in &specs {
            let (mut decoded, mut graded) = (0, false);
            let mut on = |p: Progress| match p {
                Progress::Restored(n) => assert_eq!(n, 0),
                Progress::Decoded => decoded += 1,
                Progress::Grading | Progress::Graded => graded = true,
            };
            let r = run_strategy(task.as_ref(), spec, &options, &mut on).expect("run");
            assert_eq!((decoded, graded), (2, true), "{kind:?} {}", spec.label);
            assert_eq!((r.n, r.errors), (2, 0), "{kind:?} {}: {:?}", spec.label, r.items);
            assert!(r.items.iter().all(|i| i.output_tokens > 0 && i.output_tokens <= 6 && i.prompt_tokens > 0));
            assert_eq!(r.output_tokens, r.items.iter().map(|i| i.output_tokens).sum::<usize>());
            assert!(r.tokens_per_sec > 0.0 && r.ci95.low <= r.accuracy && r.accuracy <= r.ci95.high);
            match spec.decoding {
                Decoding::Plain => assert_eq!(r.stats.summary(), "-"),
                Decoding::Entropix(_) => {
                    let branches = r.stats.entropix_branches.as_ref().expect("entropix branches");
                    assert_eq!(branches.values().sum::<usize>(), r.output_tokens);
                }
                Decoding::Mti(_) => assert_eq!(r.stats.mti_tokens, Some(r.output_tokens)),
                Decoding::Branch(_) => {
                    let b = r.stats.branch.expect("branch totals");
                    assert!(b.points > 0, "{kind:?}: {b:?}");
                    let extra: usize = r.items.iter().map(|i| i.extra_tokens).sum();
                    assert_eq!(extra, b.extra_tokens);
                    // k = 3 by default: two other continuations of at most two tokens each.
                    assert!(extra > 0 && extra <= b.points * 2 * 2, "{kind:?}: {b:?}");
                    let decoded = (r.output_tokens + extra) as f64 / r.n as f64;
                    assert!((r.mean_decoded_len - decoded).abs() < 1e-9);
                }
                Decoding::Wedlm(_) => unreachable!(),
            }
        }
    }
}

#[test]
fn humaneval_grader_passes_canonical_and_fails_wrong_code() {
    let task = HumanEval::load(&load_options(3)).expect("load");
    let timeout = Duration::from_secs(5);
    for p in task.problems() {
        // As a chat reply (whole function in a fence) and as a raw body continuation.
        let fenced = format!("Here it is:\n```python\n{}{}```\nIt works.", p.prompt, p.canonical_solution);
        assert!(grade_completion(p, &fenced, timeout).expect("run").correct, "{} fenced", p.task_id);
        assert!(grade_completion(p, &p.canonical_solution, timeout).expect("run").correct, "{} body", p.task_id);
        // The model's own tests and demo calls at top level are dropped (evalplus's
        // sanitizer), so a wrong test of its own cannot fail a right function.
        let own_tests = format!(
            "```python\n{}{}\ndef test():\n    assert False\ntest()\nprint(1 / 0)\n```",
            p.prompt, p.canonical_solution
        );
        assert!(grade_completion(p, &own_tests, timeout).expect("run").correct, "{} own tests", p.task_id);
        let wrong = format!("```python\ndef {}(*args):\n    return None\n```", p.entry_point);
        let g = grade_completion(p, &wrong, timeout).expect("run");
        assert!(!g.correct && g.detail.is_some(), "{} wrong: {g:?}", p.task_id);
    }
    let p = &task.problems()[0];
    let hang = format!("def {}(*args):\n    while True:\n        pass\n", p.entry_point);
    let g = grade_completion(p, &hang, Duration::from_secs(1)).expect("run");
    assert_eq!((g.correct, g.detail.as_deref()), (false, Some("timed out")));
    // The guard takes destructive calls away from model-written code.
    let rm = format!("import os\ndef {}(*args):\n    os.remove('x')\n", p.entry_point);
    let g = grade_completion(p, &rm, timeout).expect("run");
    assert!(!g.correct && g.detail.as_deref().is_some_and(|d| d.contains("not callable")), "{g:?}");
    // Without network (where `unshare -n` works) even loopback is unreachable.
    if network_isolated() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let net = format!(
            "import socket\ndef {}(*args):\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n",
            p.entry_point
        );
        assert!(!grade_completion(p, &net, timeout).expect("run").correct);
        listener.set_nonblocking(true).expect("nonblocking");
        assert!(listener.accept().is_err(), "the test program reached the host's loopback");
    }
    assert_eq!(extract_code("```py\nx = 1\n"), "x = 1\n");
    assert_eq!(extract_code("no fence"), "no fence");
}

#[test]
fn gsm_grader_reads_the_final_number() {
    assert_eq!(extract_final_number("3 + 4 = 7, so 7 * 2 = 14.\nThe answer is 14."), Some(14.0));
    assert_eq!(extract_final_number("The answer is $1,250.50 in total, not 3"), Some(1250.5));
    assert_eq!(extract_final_number("She has -5 left. #### -5"), Some(-5.0));
    assert_eq!(extract_final_number("Total: 12 apples and 30 pears, 42"), Some(42.0));
    assert_eq!(extract_final_number("no digits here"), None);
    assert_eq!(numbers("1,2 and 3,456 and x-2 and 0.5."), vec![1.0, 2.0, 3456.0, 2.0, 0.5]);
    let task = load_task(TaskKind::GsmSymbolic, &load_options(2)).expect("load");
    let answer = task.reference(0);
    let right = format!("Adding up gives it.\nThe answer is {answer}.");
    assert!(task.grade(0, &right).expect("grade").correct, "{right}");
    let wrong = format!("The answer is {}.", answer.parse::<f64>().expect("number") + 1.0);
    assert!(!task.grade(0, &wrong).expect("grade").correct);
    assert!(!task.grade(0, "I cannot tell.").expect("grade").correct);
}

#[test]
fn mmlu_grader_reads_the_letter() {
    assert_eq!(extract_letter("B"), Some('B'));
    assert_eq!(extract_letter("(C) 30"), Some('C'));
    assert_eq!(extract_letter("D. 33\n\nExplanation"), Some('D'));
    assert_eq!(extract_letter("A good question. The answer is B."), Some('B'));
    assert_eq!(extract_letter("Answer: C"), Some('C'));
    assert_eq!(extract_letter("I am not sure"), None);
    let task = load_task(TaskKind::Mmlu, &load_options(3)).expect("load");
    let expected = task.reference(0);
    assert!(task.grade(0, &format!("{expected}. whatever")).expect("grade").correct);
    let other = ["A", "B", "C", "D"].into_iter().find(|l| *l != expected).expect("letter");
    assert!(!task.grade(0, other).expect("grade").correct);
    // Read from the first token's distribution: the most likely letter token, spaced or not.
    let top = |first: &str| vec![("The".to_string(), -0.5), (format!(" {first}"), -1.0), (expected.clone(), -1.5)];
    assert_eq!(task.first_token_choice(0, &top(other)), Some((other.to_string(), false)));
    assert_eq!(task.first_token_choice(0, &top(&expected)), Some((expected.clone(), true)));
    assert_eq!(task.first_token_choice(0, &[("Hello".into(), -0.1), ("AB".into(), -0.2)]), None);
}

#[test]
fn strategies_parse_and_bootstrap_bounds() {
    let specs = parse_strategies("plain, entropix:samples=3 ,mti:tau=1.0:w=1.5").expect("parse");
    let Decoding::Entropix(e) = &specs[1].decoding else { panic!("entropix") };
    assert_eq!(e.n_adaptive_samples, 3);
    let Decoding::Mti(m) = &specs[2].decoding else { panic!("mti") };
    assert_eq!((m.entropy_threshold, m.guidance_scale, specs[2].label.as_str()), (1.0, 1.5, "mti:tau=1.0:w=1.5"));
    for bad in ["greedy", "mti:omega=2", "entropix:no_such_field=1", "plain:x=1", "mti:tau", " , "] {
        assert!(parse_strategies(bad).is_err(), "{bad}");
    }
    let all = accuracy_interval(&[true; 10], 1);
    assert_eq!((all.low, all.high), (1.0, 1.0));
    let half: Vec<bool> = (0..40).map(|i| i % 2 == 0).collect();
    let ci = accuracy_interval(&half, 1);
    assert!(ci.low > 0.25 && ci.low < 0.5 && ci.high > 0.5 && ci.high < 0.75, "{ci:?}");
}

/// Seeded samples of 3 items x 2, in chunks of 4 requests, kept on disk.
fn sampled_run(
    model: &std::path::Path,
    dir: &std::path::Path,
    max_tokens: usize,
) -> anyhow::Result<(entrobatch_eval::StrategyResult, usize, usize)> {
    let task = load_task(TaskKind::GsmSymbolic, &load_options(3)).expect("load");
    let spec = &parse_strategies("plain:t=1.0:n=2").expect("spec")[0];
    let options = RunOptions {
        model: model.to_path_buf(),
        max_tokens: Some(max_tokens),
        temperature: 0.0,
        seed: 5,
        max_num_seqs: 8,
        chunk: 4,
        resume_dir: Some(dir.to_path_buf()),
    };
    let (mut restored, mut decoded) = (0, 0);
    let mut on = |p: Progress| match p {
        Progress::Restored(n) => restored += n,
        Progress::Decoded => decoded += 1,
        _ => {}
    };
    let r = run_strategy(task.as_ref(), spec, &options, &mut on)?;
    Ok((r, restored, decoded))
}

#[test]
fn stopped_run_resumes_where_it_stopped() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("entrobatch-eval-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let model = tiny_eval_model("eval-smoke");
    let (full, restored, decoded) = sampled_run(&model, &dir, 5).expect("first run");
    assert_eq!((restored, decoded, full.n, full.samples, full.items.len()), (0, 6, 3, 2, 6));
    let file = dir.join("gsm-symbolic-plain_t=1.0_n=2.jsonl");
    let text = std::fs::read_to_string(&file).expect("checkpoint");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two chunks (4 + 2 requests)");
    // As if stopped while writing the second chunk: its line is cut.
    std::fs::write(&file, format!("{}\n{}\n{}", lines[0], lines[1], &lines[2][..lines[2].len() / 2])).expect("cut");
    let (resumed, restored, decoded) = sampled_run(&model, &dir, 5).expect("resumed run");
    assert_eq!((restored, decoded), (4, 2), "only the cut chunk is decoded again");
    let key = |r: &entrobatch_eval::StrategyResult| {
        r.items.iter().map(|i| (i.id.clone(), i.sample, i.completion.clone())).collect::<Vec<_>>()
    };
    assert_eq!(key(&resumed), key(&full), "same items, samples and (seeded) completions, in item order");
    assert_eq!((resumed.accuracy, resumed.output_tokens), (full.accuracy, full.output_tokens));
    // The samples of an item differ (seed + k), so n = 2 measured two draws, not one twice.
    assert!(full.items.chunks(2).any(|pair| pair[0].completion != pair[1].completion), "{:?}", key(&full));
    // Another setting refuses the file instead of mixing two runs.
    let err = sampled_run(&model, &dir, 6).expect_err("max_tokens differs").to_string();
    assert!(err.contains("holds another run"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
