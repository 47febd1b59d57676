//! The process's memory, under the names Prometheus' own clients give it
//! (`process_resident_memory_bytes`), read from `/proc/self/statm` when
//! scraped.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub(crate) struct ProcessMemory {
    resident: Gauge,
    virtual_size: Gauge,
}

impl ProcessMemory {
    pub(crate) fn register(registry: &mut Registry) -> ProcessMemory {
        let memory = ProcessMemory {
            resident: Gauge::default(),
            virtual_size: Gauge::default(),
        };
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            memory.resident.clone(),
        );
        registry.register(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            memory.virtual_size.clone(),
        );
        memory
    }

    pub(crate) fn sample(&self) {
        let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
            return;
        };
        let pages: Vec<i64> = statm.split_whitespace().filter_map(|n| n.parse().ok()).collect();
        // SAFETY: sysconf reads no memory of ours.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64;
        if let [size, resident, ..] = pages[..] {
            self.virtual_size.set(size * page);
            self.resident.set(resident * page);
        }
    }
}
