// Debian's Chromium for the e2e tests, driven by playwright-core (`npx playwright install` cannot download
// browsers here): the executable and the launch flags that work on these machines (TOOLCHAIN.md).
import { existsSync } from "node:fs";
import { chromium, type BrowserContext } from "playwright-core";

export const CHROMIUM = "/usr/bin/chromium";

const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/**
 * Starts headless Chromium with a fresh profile in `userDataDir`. `webgpu`: with navigator.gpu, on SwiftShader
 * (TOOLCHAIN.md: `--enable-unsafe-webgpu`; without it the page has navigator.gpu but no adapter).
 */
export function launch(
  userDataDir: string,
  viewport?: { width: number; height: number },
  options: { webgpu?: boolean } = {},
): Promise<BrowserContext> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
  const args = options.webgpu ? [...ARGS, "--enable-unsafe-webgpu"] : ARGS;
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args,
    ...(viewport ? { viewport } : {}),
  });
}
