//! The scheduler: a dedicated engine thread (GPU work never runs on the async runtime)
//! that owns the [`Engine`], a bounded queue of requests and the running sequences.
//!
//! Requests join at token boundaries: between two [`Engine::step`]s the thread drops
//! cancelled and expired work, admits queued requests while the engine has free
//! sequence slots, then steps every running sequence once. A request whose client went
//! away (its event receiver was dropped) is freed before the next step; a sequence whose
//! step fails gets an error event and is freed, the others go on; a panicking engine
//! fails the sequences it was running, not the server.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_llm::sampler::Sampling;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::engine::{Engine, SeqId};
use crate::error::{Result, ServeError};
use crate::metrics::Metrics;

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token (or a stop string, decided by the server).
    Stop,
    /// `max_tokens` reached (or the context is full).
    Length,
}

impl Finish {
    /// OpenAI's `finish_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What the engine thread sends a request.
#[derive(Debug)]
pub enum Event {
    /// The prompt was admitted to the engine (it left the queue).
    Started,
    /// A generated token (an end-of-generation token is not sent: `Done(Stop)` follows).
    Token(u32),
    /// The generation ended.
    Done(Finish),
    /// The request failed; no more events follow.
    Failed(ServeError),
}

/// One generation request as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct GenRequest {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Tokens to generate at most (>= 1).
    pub max_tokens: usize,
    /// Sampling parameters.
    pub sampling: Sampling,
    /// Tokens that end the generation (not sent).
    pub stop_tokens: Vec<u32>,
    /// Time allowed from submission to the last token.
    pub timeout: Duration,
}

/// Scheduler limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Requests that may wait for a sequence slot; more are refused with 429.
    pub max_queue: usize,
    /// Sequences run at once: at most the engine's `max_sequences` (0: the engine's).
    pub max_running: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_queue: 64,
            max_running: 0,
        }
    }
}

struct Job {
    id: SeqId,
    req: GenRequest,
    deadline: Instant,
    events: UnboundedSender<Event>,
}

enum Command {
    Submit(Job),
    /// Stop admitting: refuse queued requests, let running ones finish.
    Drain,
    /// Cancel everything and exit.
    Abort,
}

/// What the engine reported about itself at start.
#[derive(Clone, Debug)]
pub struct EngineInfo {
    /// Positions per sequence.
    pub context: usize,
    /// Token ids the model knows.
    pub vocab: usize,
    /// Sequences run at once.
    pub max_running: usize,
}

/// The async side's handle on the engine thread. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    tx: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
    queued: Arc<AtomicU64>,
    accepting: Arc<AtomicBool>,
    alive: Arc<AtomicBool>,
    next_id: Arc<AtomicU64>,
    limits: Limits,
    info: EngineInfo,
    thread: Arc<Joiner>,
}

/// Stops and joins the engine thread when the last [`Scheduler`] handle goes away, so the
/// engine (and its GPU objects) never outlive the server, also when a caller unwinds.
struct Joiner {
    tx: Mutex<mpsc::Sender<Command>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Joiner {
    fn join(&self) {
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        let _ = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(Command::Abort);
        self.join();
    }
}

impl Scheduler {
    /// Starts the engine thread: `make` builds the engine there (GPU objects never cross
    /// threads) and hands it to `run`, which must call the given function with it; this
    /// returns once the engine is built (or with the error that stopped it).
    ///
    /// `make` receives a callback `serve(engine)` so engines that borrow locals of the
    /// thread (a decoder borrowing its model) can be driven.
    pub fn start<F>(limits: Limits, metrics: Arc<Metrics>, make: F) -> Result<Scheduler>
    where
        F: FnOnce(&mut dyn FnMut(&mut dyn Engine)) -> Result<()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Command>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<EngineInfo>>();
        let queued = Arc::new(AtomicU64::new(0));
        let accepting = Arc::new(AtomicBool::new(true));
        let alive = Arc::new(AtomicBool::new(true));
        let thread = {
            let metrics = metrics.clone();
            let queued = queued.clone();
            let alive = alive.clone();
            let limits = limits.clone();
            std::thread::Builder::new()
                .name("sluice-engine".into())
                .spawn(move || {
                    let ready2 = ready_tx.clone();
                    let mut rx = Some(rx);
                    let r = make(&mut |engine: &mut dyn Engine| {
                        let max_running = match limits.max_running {
                            0 => engine.max_sequences(),
                            n => n.min(engine.max_sequences()),
                        }
                        .max(1);
                        let info = EngineInfo {
                            context: engine.context(),
                            vocab: engine.vocab(),
                            max_running,
                        };
                        let Some(rx) = rx.take() else {
                            let _ = ready2.send(Ok(info));
                            return;
                        };
                        let mut l = Loop {
                            engine,
                            rx,
                            metrics: &metrics,
                            queued: &queued,
                            max_running,
                            queue: VecDeque::new(),
                            running: HashMap::new(),
                            draining: false,
                        };
                        // The pool's figures are in /metrics before the server takes a
                        // request (a scrape right after start read 0 otherwise).
                        l.publish();
                        let _ = ready2.send(Ok(info));
                        l.run();
                    });
                    alive.store(false, Relaxed);
                    if let Err(e) = r {
                        let _ = ready_tx.send(Err(e));
                    }
                })
                .map_err(|e| ServeError::io("spawn the engine thread", e))?
        };
        let info = match ready_rx.recv() {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(ServeError::Unavailable(
                    "the engine thread ended before the engine was ready".into(),
                ));
            }
        };
        metrics.max_running.store(info.max_running as u64, Relaxed);
        let joiner = Arc::new(Joiner {
            tx: Mutex::new(tx.clone()),
            thread: Mutex::new(Some(thread)),
        });
        Ok(Scheduler {
            tx,
            metrics,
            queued,
            accepting,
            alive,
            next_id: Arc::new(AtomicU64::new(1)),
            limits,
            info,
            thread: joiner,
        })
    }

    /// What the engine reported at start.
    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether the engine thread is up and new requests are accepted.
    pub fn healthy(&self) -> bool {
        self.alive.load(Relaxed) && self.accepting.load(Relaxed)
    }

    /// Queues a request; its events arrive on the returned receiver. Dropping the
    /// receiver cancels the request at the next token boundary.
    pub fn submit(&self, req: GenRequest) -> Result<UnboundedReceiver<Event>> {
        if !self.accepting.load(Relaxed) {
            return Err(ServeError::Unavailable(
                "the server is shutting down".into(),
            ));
        }
        if !self.alive.load(Relaxed) {
            return Err(ServeError::Unavailable("the engine stopped".into()));
        }
        let limit = self.limits.max_queue as u64;
        let taken = self
            .queued
            .fetch_update(Relaxed, Relaxed, |q| (q < limit).then_some(q + 1));
        if let Err(q) = taken {
            self.metrics.requests_rejected.fetch_add(1, Relaxed);
            return Err(ServeError::QueueFull {
                queued: q as usize,
                limit: limit as usize,
            });
        }
        self.metrics.queue_depth.fetch_add(1, Relaxed);
        let (etx, erx) = unbounded_channel();
        let job = Job {
            id: self.next_id.fetch_add(1, Relaxed),
            deadline: Instant::now() + req.timeout,
            req,
            events: etx,
        };
        if self.tx.send(Command::Submit(job)).is_err() {
            self.queued.fetch_sub(1, Relaxed);
            self.metrics.queue_depth.fetch_sub(1, Relaxed);
            return Err(ServeError::Unavailable("the engine stopped".into()));
        }
        Ok(erx)
    }

    /// Stops accepting requests; queued ones are refused, running ones finish.
    pub fn drain(&self) {
        self.accepting.store(false, Relaxed);
        let _ = self.tx.send(Command::Drain);
    }

    /// Cancels all work; the engine thread exits after the current step.
    pub fn abort(&self) {
        self.accepting.store(false, Relaxed);
        let _ = self.tx.send(Command::Abort);
    }

    /// Waits up to `grace` for running work to finish after [`Scheduler::drain`], then
    /// aborts the rest and joins the engine thread (the engine and its GPU objects are
    /// dropped there). Returns whether everything finished within `grace`.
    pub fn shutdown(&self, grace: Duration) -> bool {
        self.drain();
        let t = Instant::now();
        while self.alive.load(Relaxed) && t.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(5));
        }
        let clean = !self.alive.load(Relaxed);
        if !clean {
            self.abort();
        }
        self.thread.join();
        clean
    }
}

struct Running {
    job: Job,
    generated: usize,
}

struct Loop<'a> {
    engine: &'a mut dyn Engine,
    rx: mpsc::Receiver<Command>,
    metrics: &'a Metrics,
    queued: &'a AtomicU64,
    max_running: usize,
    queue: VecDeque<Job>,
    running: HashMap<SeqId, Running>,
    draining: bool,
}

impl Loop<'_> {
    fn run(&mut self) {
        loop {
            if !self.take_commands() {
                break;
            }
            self.drop_dead_queued();
            self.drop_dead_running();
            self.admit();
            if !self.running.is_empty() {
                self.step();
            }
            self.publish();
            if self.draining && self.running.is_empty() && self.queue.is_empty() {
                break;
            }
        }
        self.fail_all(|| ServeError::Unavailable("the server is shutting down".into()));
        self.publish();
    }

    /// Takes queued commands (blocking while there is nothing to do). False: exit now.
    fn take_commands(&mut self) -> bool {
        let idle = self.running.is_empty() && self.queue.is_empty();
        let mut first = if idle && !self.draining {
            match self.rx.recv() {
                Ok(c) => Some(c),
                Err(_) => return false,
            }
        } else {
            None
        };
        loop {
            let cmd = match first.take() {
                Some(c) => c,
                None => match self.rx.try_recv() {
                    Ok(c) => c,
                    Err(mpsc::TryRecvError::Empty) => return true,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        // Every handle is gone: finish what runs, accept nothing new.
                        self.draining = true;
                        return !(self.running.is_empty() && self.queue.is_empty());
                    }
                },
            };
            match cmd {
                Command::Submit(job) => {
                    if self.draining {
                        self.unqueue();
                        let _ = job.events.send(Event::Failed(ServeError::Unavailable(
                            "the server is shutting down".into(),
                        )));
                    } else {
                        self.queue.push_back(job);
                    }
                }
                Command::Drain => {
                    self.draining = true;
                    while let Some(job) = self.queue.pop_front() {
                        self.unqueue();
                        let _ = job.events.send(Event::Failed(ServeError::Unavailable(
                            "the server is shutting down".into(),
                        )));
                    }
                }
                Command::Abort => return false,
            }
        }
    }

    fn unqueue(&self) {
        self.queued.fetch_sub(1, Relaxed);
        self.metrics.queue_depth.fetch_sub(1, Relaxed);
    }

    fn drop_dead_queued(&mut self) {
        let now = Instant::now();
        let mut keep = VecDeque::with_capacity(self.queue.len());
        while let Some(job) = self.queue.pop_front() {
            if job.events.is_closed() {
                self.unqueue();
                self.metrics.requests_cancelled.fetch_add(1, Relaxed);
            } else if now >= job.deadline {
                self.unqueue();
                self.metrics.requests_timed_out.fetch_add(1, Relaxed);
                let _ = job
                    .events
                    .send(Event::Failed(ServeError::Timeout(job.req.timeout)));
            } else {
                keep.push_back(job);
            }
        }
        self.queue = keep;
    }

    fn drop_dead_running(&mut self) {
        let now = Instant::now();
        let ids: Vec<SeqId> = self.running.keys().copied().collect();
        for id in ids {
            let r = &self.running[&id];
            if r.job.events.is_closed() {
                self.metrics.requests_cancelled.fetch_add(1, Relaxed);
                self.free(id);
            } else if now >= r.job.deadline {
                self.metrics.requests_timed_out.fetch_add(1, Relaxed);
                let e = ServeError::Timeout(r.job.req.timeout);
                let _ = r.job.events.send(Event::Failed(e));
                self.free(id);
            }
        }
    }

    fn free(&mut self, id: SeqId) {
        self.running.remove(&id);
        let engine = &mut *self.engine;
        if catch_unwind(AssertUnwindSafe(|| engine.free(id))).is_err() {
            eprintln!("sluice-serve: the engine panicked freeing sequence {id}");
        }
    }

    fn admit(&mut self) {
        while self.running.len() < self.max_running {
            let Some(job) = self.queue.pop_front() else {
                break;
            };
            self.unqueue();
            let engine = &mut *self.engine;
            let (prompt, sampling) = (job.req.prompt.clone(), job.req.sampling);
            let added = catch_unwind(AssertUnwindSafe(|| engine.add(job.id, prompt, sampling)))
                .unwrap_or_else(|_| Err(ServeError::Model("the engine panicked".into())));
            match added {
                Ok(()) => {
                    self.metrics
                        .prompt_tokens
                        .fetch_add(job.req.prompt.len() as u64, Relaxed);
                    let _ = job.events.send(Event::Started);
                    self.running.insert(job.id, Running { job, generated: 0 });
                }
                Err(e) => {
                    let _ = job.events.send(Event::Failed(e));
                }
            }
        }
    }

    fn step(&mut self) {
        let engine = &mut *self.engine;
        let out = match catch_unwind(AssertUnwindSafe(|| engine.step())) {
            Ok(out) => out,
            Err(_) => {
                self.fail_all(|| ServeError::Model("the engine panicked during a step".into()));
                return;
            }
        };
        self.metrics
            .record_tokens(out.iter().filter(|r| r.1.is_ok()).count() as u64);
        for (id, r) in out {
            let Some(run) = self.running.get_mut(&id) else {
                continue;
            };
            let token = match r {
                Ok(t) => t,
                Err(e) => {
                    let _ = run.job.events.send(Event::Failed(e));
                    self.free(id);
                    continue;
                }
            };
            run.generated += 1;
            let ctx_full = run.job.req.prompt.len() + run.generated >= self.engine.context();
            let finish = if run.job.req.stop_tokens.contains(&token) {
                Some(Finish::Stop)
            } else {
                let sent = run.job.events.send(Event::Token(token)).is_ok();
                if !sent {
                    self.metrics.requests_cancelled.fetch_add(1, Relaxed);
                    self.free(id);
                    continue;
                }
                (run.generated >= run.job.req.max_tokens || ctx_full).then_some(Finish::Length)
            };
            if let Some(f) = finish {
                self.metrics.requests_finished.fetch_add(1, Relaxed);
                let _ = run.job.events.send(Event::Done(f));
                self.free(id);
            }
        }
    }

    fn fail_all(&mut self, err: impl Fn() -> ServeError) {
        let ids: Vec<SeqId> = self.running.keys().copied().collect();
        for id in ids {
            if let Some(r) = self.running.get(&id) {
                let _ = r.job.events.send(Event::Failed(err()));
            }
            self.free(id);
        }
        while let Some(job) = self.queue.pop_front() {
            self.unqueue();
            let _ = job.events.send(Event::Failed(err()));
        }
    }

    fn publish(&self) {
        let m = self.metrics;
        m.running.store(self.running.len() as u64, Relaxed);
        m.kv_in_use
            .store(self.engine.kv_slots_in_use() as u64, Relaxed);
        m.kv_total
            .store(self.engine.kv_slots_total() as u64, Relaxed);
        m.kv_block.store(self.engine.kv_block() as u64, Relaxed);
        m.recorded_steps
            .store(self.engine.recorded_steps() as u64, Relaxed);
    }
}
