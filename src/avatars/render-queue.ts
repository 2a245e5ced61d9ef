import { HttpError } from '../../plugins/http/errors.js';

/** 503: AVATAR_RENDER_QUEUE_LIMIT renders already wait. */
export class RenderQueueFull extends HttpError {
  constructor(retryAfterSeconds: number) {
    super(503, 'Too many avatar uploads in progress; try again later', { 'Retry-After': retryAfterSeconds });
  }
}

/** Weight of the latest render in the running mean of their times. */
const MEAN_WEIGHT = 0.2;

/**
 * Avatar renders in this process, one at a time: libvips already spreads one render over every core,
 * so a second at once would only double the memory (and take another thread of libuv's pool, which
 * file reads and writes share). At most `limit` more wait their turn, in order; past it RenderQueueFull.
 */
export class RenderQueue {
  private running = false;
  private readonly waiting: (() => void)[] = [];
  private meanMs = Number.NaN;

  /** Runs `render` when its turn comes, or refuses at once when `limit` renders already wait. */
  async run<T>(limit: number, render: () => Promise<T>): Promise<T> {
    if (this.running) {
      if (this.waiting.length >= limit) throw new RenderQueueFull(this.retryAfterSeconds());
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    }
    this.running = true;
    const started = performance.now();
    try {
      return await render();
    } finally {
      const ms = performance.now() - started;
      this.meanMs = Number.isNaN(this.meanMs) ? ms : this.meanMs + MEAN_WEIGHT * (ms - this.meanMs);
      // The turn passes straight to the next in line, so nothing can slip in between.
      const next = this.waiting.shift();
      if (next) next();
      else this.running = false;
    }
  }

  /** Seconds until the renders waiting now and the one running are done, at the mean time so far (at least 1). */
  private retryAfterSeconds(): number {
    if (Number.isNaN(this.meanMs)) return 1;
    return Math.max(1, Math.ceil(((this.waiting.length + 1) * this.meanMs) / 1000));
  }
}
