package codecsvc

import "runtime"

type runtimeMemStats = runtime.MemStats

func readMemStats(m *runtime.MemStats) { runtime.ReadMemStats(m) }
