// A terminal in one replica, over the exec WebSocket the cpln CLI uses ({remote}/exec): the first
// message names the replica and carries the signed-in key, then keystrokes go as `{type: 'data'}`
// messages and the command's output comes back as binary messages. Keel runs the shell on pipes
// (no pseudo-terminal), so the line is edited and echoed here and sent when Enter is pressed. The
// server checks the `exec` permission first; its refusal is a text message shown as an alert.
// This module (and xterm.js with it) is loaded when a terminal is first opened.
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import { call, explain, session, socketUrl, type Item } from './api';
import { ErrorBox, useLoad } from './widgets';

type State = 'connecting' | 'open' | 'ended' | 'refused';

export function TerminalView(props: { org: string; gvc: string; path: string; workload: Item; location: string; replica: string; container?: string }) {
  const { org, gvc, replica } = props;
  /** The deployment's location (not the page's). */
  const at = props.location;
  const containers: string[] = (props.workload.spec?.containers ?? []).map((c: { name: string }) => c.name);
  const container = props.container ?? containers[0];
  const host = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<State>('connecting');
  const [refusal, setRefusal] = useState<string>();
  // Where the replicas of the deployment are reached (status.remote), as the CLI finds it; only its
  // path is used, on this origin, since the console's policy lets it reach its own server only.
  const deployment = useLoad((signal) => call<Item>('GET', `${props.path}/deployment/${encodeURIComponent(at)}`, undefined, { signal }), [props.path, at]);
  const remoteUrl = deployment.data?.status?.remote as string | undefined;
  const remote = remoteUrl ? new URL(remoteUrl, location.href).pathname : undefined;

  useEffect(() => {
    if (!remote || !host.current) return;
    const term = new Terminal({ convertEol: true, cursorBlink: true, rows: 24, fontSize: 14 });
    term.open(host.current);
    term.focus();
    term.writeln(`Connecting to ${replica} (container ${container}) in ${at}…`);
    const ws = new WebSocket(socketUrl(`${remote}/exec`));
    ws.binaryType = 'arraybuffer';
    ws.onopen = () => {
      // The shell's permission is exec (a named command), which the server checks before anything else.
      // No terminal of its own: a shell's line editing would query the cursor, and xterm's answers
      // would arrive as typed input.
      ws.send(JSON.stringify({ token: session.key(), org, gvc, pod: replica, container, command: ['sh', '-i'], tty: false }));
      setState('open');
      term.writeln('Connected. The shell runs without a terminal of its own: type a command and press Enter.');
    };
    ws.onmessage = (event) => {
      if (typeof event.data !== 'string') return term.write(new Uint8Array(event.data as ArrayBuffer));
      // Text is the server speaking: a refusal, or how the session ended.
      const said = event.data.trim();
      term.writeln(`\r\n\x1b[31m${said}\x1b[0m`);
      if (/^Unauthorized|^Failed to create terminal session: (?!command terminated)/.test(said)) {
        setRefusal(said);
        setState('refused');
      }
    };
    ws.onclose = () => {
      setState((s) => (s === 'refused' ? s : 'ended'));
      term.writeln('\r\n[session ended]');
    };
    const send = (text: string) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'data', buffer: Array.from(new TextEncoder().encode(text)) }));
    };
    let line = '';
    term.onData((data) => {
      for (const ch of data) {
        if (ch === '\r' || ch === '\n') {
          term.write('\r\n');
          send(`${line}\n`);
          line = '';
        } else if (ch === '\x7f' || ch === '\b') {
          if (line) {
            line = line.slice(0, -1);
            term.write('\b \b');
          }
        } else if (ch === '\x03') {
          // Without a terminal there is no signal to send; the typed line is dropped.
          term.write('^C\r\n');
          line = '';
        } else if (ch >= ' ' || ch === '\t') {
          line += ch;
          term.write(ch);
        }
      }
    });
    return () => {
      ws.onclose = null;
      ws.close();
      term.dispose();
    };
  }, [remote, replica, container]);

  if (deployment.error) return <ErrorBox error={explain(deployment.error)} />;
  if (!deployment.data) return <p>Loading…</p>;
  if (!remote) return <p class="muted">The deployment in {at} has no replicas to reach yet.</p>;
  return (
    <div>
      <h2>
        Terminal in {replica} <span class="muted">({container})</span>
      </h2>
      {containers.length > 1 ? (
        <p>
          Container:{' '}
          {containers.map((c) => (
            <a key={c} href={`#${props.path}?tab=terminal&location=${encodeURIComponent(at)}&replica=${encodeURIComponent(replica)}&container=${encodeURIComponent(c)}`} aria-current={c === container ? 'page' : undefined}>
              {c}{' '}
            </a>
          ))}
        </p>
      ) : null}
      <p class="muted" role="status" data-testid="terminal-state">
        {state === 'connecting' ? 'Connecting…' : state === 'open' ? 'Connected' : state === 'refused' ? 'Refused' : 'Session ended'}
      </p>
      <ErrorBox error={refusal ? `The server refused the terminal: ${refusal}. Opening a terminal needs the exec permission on the workload.` : undefined} />
      <div class="terminal" ref={host} data-testid="terminal" />
    </div>
  );
}
