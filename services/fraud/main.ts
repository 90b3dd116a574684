import { runLane } from '../../shared/lane-kit/lane-main.ts'
import { buildApp } from './app.ts'

await runLane('fraud', buildApp, '/v1/fraud/screenings/00000000-0000-7000-8000-000000000000')
