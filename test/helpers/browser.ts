// Debian's Chromium, headless, driven by playwright-core (no browser download).
// The flags keep Chromium off the network it cannot reach here, and --no-sandbox
// is needed because the tests run as root.
import { chromium, type Browser } from 'playwright-core'
import type { Test } from 'tap'

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

export async function launchChromium (t: Test): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  })
  t.teardown(() => browser.close())
  return browser
}
