import { runLane } from '../../shared/lane-kit/lane-main.ts'
import { buildApp } from './app.ts'

await runLane('card-auth', buildApp)
