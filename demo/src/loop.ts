// A pausable training loop. The three tabs share one core (one Worker), so two trainings at once would
// each run at half speed and their tokens/s would mislead: starting one loop pauses the others.

import type { TrainingState } from "./state.js";
import { errorText } from "./ui.js";

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

/**
 * A tab's loop, wired the way every tab shows it: `toggle` starts and pauses it and says which it will do,
 * `s.state` follows it, and an error stops it with its message in `s.error` and in `errorEl`.
 */
export function tabLoop(
  body: () => Promise<boolean>,
  s: TrainingState,
  toggle: HTMLButtonElement,
  errorEl: HTMLElement,
): TrainingLoop {
  const loop = new TrainingLoop(
    body,
    (running) => {
      toggle.textContent = running ? "Pause" : "Resume";
      if (s.state !== "error") s.state = running ? "training" : s.step > 0 ? "paused" : "idle";
    },
    (e) => {
      s.state = "error";
      s.error = errorText(e);
      errorEl.textContent = `Training stopped: ${s.error}`;
    },
  );
  toggle.onclick = () => (loop.running ? loop.pause() : loop.start());
  return loop;
}
