/** A replica as the network sees it: whose it is, where it is, whether it serves. */
export interface Peer { org: string; gvc: string; workload: string; replica: string; address: string; ready: boolean; spec: Record<string, any> }
