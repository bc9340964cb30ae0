import net from 'node:net';
import tls from 'node:tls';
import type { TemporalConnectionOptions } from './temporalConnection';

/** How long to listen: a TLS 1.3 server refuses a client certificate only after the handshake completes. */
const PROBE_MS = 2000;

/**
 * Why a TLS connection to the server fails (an unknown CA, a missing client certificate), in OpenSSL's
 * words; undefined when it succeeds or TLS is off. The gRPC client itself only reports a missed deadline.
 */
export function tlsFailure(options: TemporalConnectionOptions): Promise<string | undefined> {
  if (!options.tls && options.apiKey === undefined) return Promise.resolve(undefined);
  const settings = typeof options.tls === 'object' && options.tls ? options.tls : {};
  const separator = options.address.lastIndexOf(':');
  const host = options.address.slice(0, separator);
  const socket = tls.connect({
    host,
    port: Number(options.address.slice(separator + 1)),
    servername: settings.serverNameOverride ?? (net.isIP(host) ? undefined : host),
    ca: settings.serverRootCACertificate && Buffer.from(settings.serverRootCACertificate),
    cert: settings.clientCertPair && Buffer.from(settings.clientCertPair.crt),
    key: settings.clientCertPair && Buffer.from(settings.clientCertPair.key),
    ALPNProtocols: ['h2'],
  });
  let timer: NodeJS.Timeout | undefined;
  return new Promise<string | undefined>((resolve) => {
    // OpenSSL's errors carry their gist in `reason`; the message adds codes and source file names.
    socket.once('error', (err: Error & { reason?: string }) => resolve(err.reason ?? err.message));
    timer = setTimeout(() => resolve(undefined), PROBE_MS);
  }).finally(() => {
    clearTimeout(timer);
    socket.destroy();
  });
}
