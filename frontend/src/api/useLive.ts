import { useEffect, useRef, useState } from 'react';
import { liveClient, type ChannelMessage, type LiveStatus } from './live';

/** Subscribe to one live channel while the component is mounted and `enabled`. */
export function useChannel(channel: string | null, onMessage: (msg: ChannelMessage) => void, enabled = true): void {
  const fn = useRef(onMessage);
  fn.current = onMessage;
  useEffect(() => {
    if (!channel || !enabled) return;
    return liveClient().subscribe(channel, (m) => fn.current(m));
  }, [channel, enabled]);
}

export function useLiveStatus(): LiveStatus {
  const [status, setStatus] = useState<LiveStatus>(() => liveClient().status);
  useEffect(() => liveClient().onStatus(setStatus), []);
  return status;
}
