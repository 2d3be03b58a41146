// A pausable training loop. The three tabs share one core (one Worker), so two trainings at once would
// each run at half speed and their tokens/s would mislead: starting one loop pauses the others.

const loops = new Set<TrainingLoop>();

export class TrainingLoop {
  #running = false;
  /** The loop in flight: a new start waits for it, so two loops never step the same model at once. */
  #active: Promise<void> = Promise.resolve();

  /**
   * @param body one step (or a few); resolves to false to stop the loop (e.g. the target was reached)
   * @param onChange called with the new running state
   * @param onError called when `body` throws; the loop stops
   */
  constructor(
    private readonly body: () => Promise<boolean>,
    private readonly onChange: (running: boolean) => void,
    private readonly onError: (e: unknown) => void,
  ) {
    loops.add(this);
  }

  get running(): boolean {
    return this.#running;
  }

  start(): void {
    for (const l of loops) if (l !== this) l.pause();
    if (this.#running) return;
    this.#running = true;
    this.onChange(true);
    const previous = this.#active;
    this.#active = (async () => {
      await previous;
      try {
        while (this.#running) {
          if (!(await this.body())) this.pause();
        }
      } catch (e) {
        this.pause();
        this.onError(e);
      }
    })();
  }

  /** Stops after the step in flight. */
  pause(): void {
    if (!this.#running) return;
    this.#running = false;
    this.onChange(false);
  }

  /** Pauses and resolves when the step in flight is done (before replacing or saving the model). */
  async stop(): Promise<void> {
    this.pause();
    await this.#active;
  }
}
