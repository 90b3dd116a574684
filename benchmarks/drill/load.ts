// The recorded run: the three load streams and the fault's schedule together,
// from the baseline's start to the recovery's end, with the generator's own
// event-loop delay measured beside them.
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { runOpenLoop, type OpenLoopResult } from '../open-loop.ts'
import type { DrillClients } from './clients.ts'
import { faultText, type FaultSchedule } from './fault.ts'
import type { DrillOptions } from './options.ts'
import { startSampler, type Sample, type Sampler } from './sampler.ts'
import { CardStream, RetryingClients, TaxStream } from './streams.ts'
import { phaseTimeline, startClock, type Clock, type PhaseTimeline } from './timeline.ts'

export interface LoopDelay { p50Ms: number, p99Ms: number, maxMs: number }

export interface LoadRun { card: OpenLoopResult, tax: OpenLoopResult, generatorDelay: LoopDelay }

/** Everything the run recorded, for the readings and the report. */
export interface Recorded {
  clock: Clock
  timeline: PhaseTimeline
  samples: Sample[]
  card: CardStream
  tax: TaxStream
  storm: RetryingClients
  load: LoadRun
}

/** The clock starts, the deck is sampled, and the load and the fault run their schedule. */
export async function recordRun (
  o: DrillOptions, clients: DrillClients, runId: string, fault: FaultSchedule
): Promise<Recorded> {
  const clock = startClock()
  const sampler = startSampler(clients, clock)
  const timeline = phaseTimeline(o)
  const ctx = { clients, runId, clock, timeline }
  const streams = {
    card: new CardStream(ctx),
    tax: new TaxStream(ctx),
    storm: new RetryingClients(ctx, o.stormIntervalMs),
  }
  console.log(`drill ${runId}: card ${o.cardRate}/s, tax ${o.taxRate}/s, ${o.stormClients} retrying clients; baseline ${o.baselineSeconds} s, fault ${o.faultSeconds} s (${faultText(o)}), recovery ${o.recoverySeconds} s`)
  // Stopped on the way out too: a run that failed must not leave the sampler polling.
  const load = await runLoad({ o, clock, timeline, ...streams, fault, sampler }).finally(() => sampler.stop())
  return { clock, timeline, samples: sampler.samples, ...streams, load }
}

interface LoadInputs {
  o: Pick<DrillOptions, 'cardRate' | 'taxRate' | 'stormClients'>
  clock: Clock
  timeline: PhaseTimeline
  card: CardStream
  tax: TaxStream
  storm: RetryingClients
  fault: FaultSchedule
  sampler: Sampler
}

// The load generator's own event-loop delay: a share of every latency it
// measures (one process sends all three streams), reported beside them.
const LOOP_TIMER_MS = 5

async function runLoad (x: LoadInputs): Promise<LoadRun> {
  const durationMs = x.timeline.end * 1000
  await x.fault.markCpu()
  const fault = x.fault.run(x.clock, x.timeline)
  const generatorLoop = monitorEventLoopDelay({ resolution: LOOP_TIMER_MS })
  generatorLoop.enable()
  const [card, tax] = await Promise.all([
    runOpenLoop({ rate: x.o.cardRate, durationMs, send: x.card.send, onResult: x.card.onResult }),
    runOpenLoop({ rate: x.o.taxRate, durationMs, send: x.tax.send, onResult: x.tax.onResult }),
    fault,
    ...Array.from({ length: x.o.stormClients }, (_x, j) => x.storm.run(j)),
  ])
  await x.fault.markCpu()
  await x.sampler.stop()
  generatorLoop.disable()
  // Its samples are whole timer intervals: the delay is what came beyond the timer's own 5 ms.
  const loopMs = (ns: number): number => Math.max(0, Math.round((ns / 1e6 - LOOP_TIMER_MS) * 100) / 100)
  const generatorDelay = {
    p50Ms: loopMs(generatorLoop.percentile(50)),
    p99Ms: loopMs(generatorLoop.percentile(99)),
    maxMs: loopMs(generatorLoop.max),
  }
  console.log(`  load done at ${x.clock.at().toFixed(1)} s (card sent ${card.sentRate.toFixed(0)}/s, send lag p50 ${card.sendLag.p50Ms} ms, p99 ${card.sendLag.p99Ms} ms, max ${card.maxSendLagMs.toFixed(1)} ms;` +
    ` tax sent ${tax.sentRate.toFixed(0)}/s, send lag p50 ${tax.sendLag.p50Ms} ms, p99 ${tax.sendLag.p99Ms} ms, max ${tax.maxSendLagMs.toFixed(1)} ms;` +
    ` the generator's event-loop delay p50 ${generatorDelay.p50Ms} ms, p99 ${generatorDelay.p99Ms} ms, max ${generatorDelay.maxMs} ms)`)
  return { card, tax, generatorDelay }
}
