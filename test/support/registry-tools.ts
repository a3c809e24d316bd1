// The registry clients the registry tests drive (skopeo, podman): a missing one skips its tests
// with a visible notice, unless KEEL_REQUIRE_REGISTRY_TOOLS=1 (CI), where it fails the run.
import { execFile, execFileSync } from 'node:child_process';

const REQUIRED = process.env.KEEL_REQUIRE_REGISTRY_TOOLS === '1';

/** A skip reason when `tool` is not installed (false when it is). */
export function toolMissing(tool: string): string | false {
  try {
    execFileSync(tool, ['--version'], { stdio: 'ignore' });
    return false;
  } catch {
    if (REQUIRED) throw new Error(`${tool} is required (KEEL_REQUIRE_REGISTRY_TOOLS=1) but is not installed`);
    console.log(`# NOTICE: ${tool} is not installed; its registry tests are SKIPPED`);
    return `${tool} is not installed`;
  }
}

export interface ToolResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a tool without blocking the event loop (the Keel it talks to serves in this process). */
export function runTool(tool: string, args: string[], options: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<ToolResult> {
  return new Promise((resolve) => {
    execFile(tool, args, { timeout: options.timeoutMs ?? 120_000, maxBuffer: 16 * 1024 * 1024, env: options.env }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}
