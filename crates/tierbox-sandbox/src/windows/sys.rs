//! The Windows system calls of the Job Object backend: every unsafe block of it, each
//! wrapped once in a function whose error names the call.
//!
//! Launch order (each step needs the one before):
//! 1. create the job and set its limits — before any process exists, so no process ever
//!    runs unlimited;
//! 2. create the stdio pipes, the child's ends inheritable and the parent's not;
//! 3. `CreateProcessW` suspended, inheriting only the three stdio handles (a handle
//!    list), with the exact environment block and command line;
//! 4. assign the process to the job — while it is suspended, so neither it nor a child
//!    it could start runs outside the job;
//! 5. resume its thread.

use std::ffi::{OsStr, c_void};
use std::fs::File;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::time::Duration;

use tierbox_policy::plan::Plan;
use tierbox_policy::{Layer, Rejection};
use windows_sys::Win32::Foundation::{
    HANDLE, HANDLE_FLAG_INHERIT, SetHandleInformation, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Security::SECURITY_ATTRIBUTES;
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_CPU_RATE_CONTROL_ENABLE,
    JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP, JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    JOB_OBJECT_LIMIT_BREAKAWAY_OK, JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
    JOB_OBJECT_LIMIT_JOB_MEMORY, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, JOB_OBJECT_LIMIT_PROCESS_TIME,
    JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK, JOB_OBJECT_UILIMIT_DESKTOP,
    JOB_OBJECT_UILIMIT_DISPLAYSETTINGS, JOB_OBJECT_UILIMIT_EXITWINDOWS,
    JOB_OBJECT_UILIMIT_GLOBALATOMS, JOB_OBJECT_UILIMIT_HANDLES, JOB_OBJECT_UILIMIT_READCLIPBOARD,
    JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS, JOB_OBJECT_UILIMIT_WRITECLIPBOARD,
    JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION, JOBOBJECT_BASIC_UI_RESTRICTIONS,
    JOBOBJECT_CPU_RATE_CONTROL_INFORMATION, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JOBOBJECTINFOCLASS, JobObjectBasicAndIoAccountingInformation, JobObjectBasicUIRestrictions,
    JobObjectCpuRateControlInformation, JobObjectExtendedLimitInformation,
    QueryInformationJobObject, SetInformationJobObject, TerminateJobObject,
};
use windows_sys::Win32::System::Pipes::CreatePipe;
use windows_sys::Win32::System::Threading::{
    CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT, CreateProcessW,
    DeleteProcThreadAttributeList, EXTENDED_STARTUPINFO_PRESENT, GetExitCodeProcess,
    InitializeProcThreadAttributeList, LPPROC_THREAD_ATTRIBUTE_LIST,
    PROC_THREAD_ATTRIBUTE_HANDLE_LIST, PROCESS_INFORMATION, ResumeThread, STARTF_USESTDHANDLES,
    STARTUPINFOEXW, TerminateProcess, UpdateProcThreadAttribute, WaitForSingleObject,
};

use super::{
    CommandLineError, JobAccounting, JobLimits, check_layers, command_line, environment_block,
    flags, job_limits,
};

// The flag values of `super::flags` (pure, tested everywhere) are Windows' own.
const _: () = {
    assert!(flags::LIMIT_PROCESS_TIME == JOB_OBJECT_LIMIT_PROCESS_TIME);
    assert!(flags::LIMIT_ACTIVE_PROCESS == JOB_OBJECT_LIMIT_ACTIVE_PROCESS);
    assert!(flags::LIMIT_JOB_MEMORY == JOB_OBJECT_LIMIT_JOB_MEMORY);
    assert!(flags::LIMIT_DIE_ON_UNHANDLED_EXCEPTION == JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION);
    assert!(flags::LIMIT_BREAKAWAY_OK == JOB_OBJECT_LIMIT_BREAKAWAY_OK);
    assert!(flags::LIMIT_SILENT_BREAKAWAY_OK == JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK);
    assert!(flags::LIMIT_KILL_ON_JOB_CLOSE == JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE);
    assert!(flags::UILIMIT_HANDLES == JOB_OBJECT_UILIMIT_HANDLES);
    assert!(flags::UILIMIT_READCLIPBOARD == JOB_OBJECT_UILIMIT_READCLIPBOARD);
    assert!(flags::UILIMIT_WRITECLIPBOARD == JOB_OBJECT_UILIMIT_WRITECLIPBOARD);
    assert!(flags::UILIMIT_SYSTEMPARAMETERS == JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS);
    assert!(flags::UILIMIT_DISPLAYSETTINGS == JOB_OBJECT_UILIMIT_DISPLAYSETTINGS);
    assert!(flags::UILIMIT_GLOBALATOMS == JOB_OBJECT_UILIMIT_GLOBALATOMS);
    assert!(flags::UILIMIT_DESKTOP == JOB_OBJECT_UILIMIT_DESKTOP);
    assert!(flags::UILIMIT_EXITWINDOWS == JOB_OBJECT_UILIMIT_EXITWINDOWS);
    assert!(flags::CPU_RATE_CONTROL_ENABLE == JOB_OBJECT_CPU_RATE_CONTROL_ENABLE);
    assert!(flags::CPU_RATE_CONTROL_HARD_CAP == JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP);
};

/// Size of each stdio pipe's buffer, bytes (the system default is one page).
const PIPE_BUFFER_BYTES: u32 = 64 * 1024;

/// Exit code of processes killed through [`JobObject::terminate`] (as `timeout(1)`
/// reports a deadline).
pub const KILLED_EXIT_CODE: u32 = 124;

/// Why a Windows launch failed.
#[derive(Debug, thiserror::Error)]
pub enum WindowsLaunchError {
    /// The policy does not accept what a Job Object cannot enforce.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The argv or environment cannot be passed.
    #[error(transparent)]
    CommandLine(#[from] CommandLineError),
    /// A system call failed.
    #[error("{call}: {source}")]
    Sys {
        /// The call and what it was for.
        call: &'static str,
        /// Its error.
        source: io::Error,
    },
}

fn last_error(call: &'static str) -> WindowsLaunchError {
    WindowsLaunchError::Sys {
        call,
        source: io::Error::last_os_error(),
    }
}

/// A Job Object (closed on drop, which kills every process in it).
#[derive(Debug)]
pub struct JobObject(OwnedHandle);

impl JobObject {
    /// Creates an anonymous job with `limits`.
    pub fn create(limits: &JobLimits) -> Result<Self, WindowsLaunchError> {
        // SAFETY: both pointers may be null (default security, no name); the returned
        // handle is checked before it is owned.
        let raw = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if raw.is_null() {
            return Err(last_error("CreateJobObjectW"));
        }
        // SAFETY: `raw` is a fresh, valid handle owned by nobody else.
        let job = Self(unsafe { OwnedHandle::from_raw_handle(raw) });
        let mut ext = JOBOBJECT_EXTENDED_LIMIT_INFORMATION::default();
        ext.BasicLimitInformation.LimitFlags = limits.limit_flags();
        ext.BasicLimitInformation.ActiveProcessLimit = limits.active_process_limit;
        ext.BasicLimitInformation.PerProcessUserTimeLimit =
            i64::try_from(limits.per_process_user_time_100ns).unwrap_or(i64::MAX);
        ext.JobMemoryLimit = usize::try_from(limits.job_memory_limit_bytes).unwrap_or(usize::MAX);
        job.set(
            JobObjectExtendedLimitInformation,
            &ext,
            "SetInformationJobObject(JobObjectExtendedLimitInformation)",
        )?;
        let mut cpu = JOBOBJECT_CPU_RATE_CONTROL_INFORMATION {
            ControlFlags: limits.cpu_rate_control_flags(),
            ..Default::default()
        };
        cpu.Anonymous.CpuRate = limits.cpu_rate_hard_cap;
        job.set(
            JobObjectCpuRateControlInformation,
            &cpu,
            "SetInformationJobObject(JobObjectCpuRateControlInformation)",
        )?;
        let ui = JOBOBJECT_BASIC_UI_RESTRICTIONS {
            UIRestrictionsClass: limits.ui.class(),
        };
        job.set(
            JobObjectBasicUIRestrictions,
            &ui,
            "SetInformationJobObject(JobObjectBasicUIRestrictions)",
        )?;
        Ok(job)
    }

    fn raw(&self) -> HANDLE {
        self.0.as_raw_handle()
    }

    fn set<T>(
        &self,
        class: JOBOBJECTINFOCLASS,
        info: &T,
        call: &'static str,
    ) -> Result<(), WindowsLaunchError> {
        let size = u32::try_from(std::mem::size_of::<T>()).unwrap_or(u32::MAX);
        // SAFETY: the job handle is valid for `self`'s life; `info` points to a live,
        // initialised structure of the type `class` names, and `size` is its size.
        let ok = unsafe {
            SetInformationJobObject(self.raw(), class, std::ptr::from_ref(info).cast(), size)
        };
        if ok == 0 {
            return Err(last_error(call));
        }
        Ok(())
    }

    fn query<T: Default>(
        &self,
        class: JOBOBJECTINFOCLASS,
        call: &'static str,
    ) -> Result<T, WindowsLaunchError> {
        let mut info = T::default();
        let size = u32::try_from(std::mem::size_of::<T>()).unwrap_or(u32::MAX);
        // SAFETY: `info` is a live structure of the type `class` names, `size` its size;
        // the return-length pointer may be null.
        let ok = unsafe {
            QueryInformationJobObject(
                self.raw(),
                class,
                std::ptr::from_mut(&mut info).cast(),
                size,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(last_error(call));
        }
        Ok(info)
    }

    /// Puts `process` (created suspended) in the job.
    pub fn assign(&self, process: &OwnedHandle) -> Result<(), WindowsLaunchError> {
        // SAFETY: both handles are valid and owned by their callers for the call.
        let ok = unsafe { AssignProcessToJobObject(self.raw(), process.as_raw_handle()) };
        if ok == 0 {
            return Err(last_error("AssignProcessToJobObject"));
        }
        Ok(())
    }

    /// Kills every process in the job with `exit_code`.
    pub fn terminate(&self, exit_code: u32) -> Result<(), WindowsLaunchError> {
        // SAFETY: the job handle is valid for `self`'s life.
        let ok = unsafe { TerminateJobObject(self.raw(), exit_code) };
        if ok == 0 {
            return Err(last_error("TerminateJobObject"));
        }
        Ok(())
    }

    /// The job's accounting so far.
    pub fn accounting(&self) -> Result<JobAccounting, WindowsLaunchError> {
        let basic: JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION = self.query(
            JobObjectBasicAndIoAccountingInformation,
            "QueryInformationJobObject(JobObjectBasicAndIoAccountingInformation)",
        )?;
        let ext: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = self.query(
            JobObjectExtendedLimitInformation,
            "QueryInformationJobObject(JobObjectExtendedLimitInformation)",
        )?;
        let b = &basic.BasicInfo;
        Ok(JobAccounting {
            total_user_time_100ns: u64::try_from(b.TotalUserTime).unwrap_or(0),
            total_kernel_time_100ns: u64::try_from(b.TotalKernelTime).unwrap_or(0),
            total_processes: b.TotalProcesses,
            active_processes: b.ActiveProcesses,
            total_terminated_processes: b.TotalTerminatedProcesses,
            read_bytes: basic.IoInfo.ReadTransferCount,
            write_bytes: basic.IoInfo.WriteTransferCount,
            peak_job_memory_bytes: ext.PeakJobMemoryUsed as u64,
            peak_process_memory_bytes: ext.PeakProcessMemoryUsed as u64,
        })
    }
}

/// A started Windows run.
#[derive(Debug)]
pub struct WindowsLaunched {
    /// The job holding the whole process tree; dropping it kills the tree.
    pub job: JobObject,
    /// The program's process.
    pub process: OwnedHandle,
    /// Its process id (also its process group id).
    pub pid: u32,
    /// Write end of stdin when the Plan carries data (stdin reads EOF otherwise).
    pub stdin: Option<File>,
    /// Read end of stdout.
    pub stdout: File,
    /// Read end of stderr.
    pub stderr: File,
    /// The limits set on the job.
    pub limits: JobLimits,
    /// Layers the policy allowed to be missing that a Job Object does not provide.
    pub missing_layers: Vec<Layer>,
}

impl WindowsLaunched {
    /// Waits up to `timeout` (forever when `None`) for the program to exit; its exit
    /// code, or `None` when it is still running.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<Option<u32>, WindowsLaunchError> {
        let ms = timeout.map_or(u32::MAX, |t| {
            u32::try_from(t.as_millis()).unwrap_or(u32::MAX - 1)
        });
        // SAFETY: the process handle is valid for `self`'s life.
        let r = unsafe { WaitForSingleObject(self.process.as_raw_handle(), ms) };
        match r {
            WAIT_OBJECT_0 => {}
            WAIT_TIMEOUT => return Ok(None),
            _ => return Err(last_error("WaitForSingleObject")),
        }
        let mut code = 0u32;
        // SAFETY: valid process handle; `code` is a live u32.
        let ok = unsafe { GetExitCodeProcess(self.process.as_raw_handle(), &mut code) };
        if ok == 0 {
            return Err(last_error("GetExitCodeProcess"));
        }
        Ok(Some(code))
    }

    /// Kills the whole tree ([`KILLED_EXIT_CODE`]).
    pub fn kill(&self) -> Result<(), WindowsLaunchError> {
        self.job.terminate(KILLED_EXIT_CODE)
    }
}

/// A NUL-terminated UTF-16 string; `None` when `s` holds a NUL.
fn wide(s: &OsStr) -> Option<Vec<u16>> {
    let mut w: Vec<u16> = s.encode_wide().collect();
    if w.contains(&0) {
        return None;
    }
    w.push(0);
    Some(w)
}

/// A pipe whose `child` end is inheritable and whose `parent` end is not.
struct Pipe {
    child: OwnedHandle,
    parent: OwnedHandle,
}

/// A pipe for the child's stdin (`child_reads`) or stdout/stderr.
fn pipe(child_reads: bool) -> Result<Pipe, WindowsLaunchError> {
    let sa = SECURITY_ATTRIBUTES {
        nLength: u32::try_from(std::mem::size_of::<SECURITY_ATTRIBUTES>()).unwrap_or(0),
        lpSecurityDescriptor: std::ptr::null_mut(),
        bInheritHandle: 1,
    };
    let mut read: HANDLE = std::ptr::null_mut();
    let mut write: HANDLE = std::ptr::null_mut();
    // SAFETY: both out-pointers are live locals; `sa` is initialised and outlives the
    // call.
    let ok = unsafe { CreatePipe(&mut read, &mut write, &sa, PIPE_BUFFER_BYTES) };
    if ok == 0 {
        return Err(last_error("CreatePipe"));
    }
    // SAFETY: CreatePipe succeeded: both handles are fresh and owned by nobody else.
    let (read, write) = unsafe {
        (
            OwnedHandle::from_raw_handle(read),
            OwnedHandle::from_raw_handle(write),
        )
    };
    let (child, parent) = if child_reads {
        (read, write)
    } else {
        (write, read)
    };
    // SAFETY: `parent` is a valid handle; clearing HANDLE_FLAG_INHERIT only stops it
    // from being inherited.
    let ok = unsafe { SetHandleInformation(parent.as_raw_handle(), HANDLE_FLAG_INHERIT, 0) };
    if ok == 0 {
        return Err(last_error("SetHandleInformation(parent end of a pipe)"));
    }
    Ok(Pipe { child, parent })
}

/// A process attribute list naming the only handles the child inherits.
struct HandleList {
    /// Backing storage (usize-aligned).
    buf: Vec<usize>,
    /// The handles; must outlive the list.
    _handles: Box<[HANDLE; 3]>,
}

impl HandleList {
    fn new(handles: [HANDLE; 3]) -> Result<Self, WindowsLaunchError> {
        let mut size = 0usize;
        // SAFETY: a null list with a size pointer asks for the needed size; the call
        // "fails" with ERROR_INSUFFICIENT_BUFFER by design, so its result is not checked.
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), 1, 0, &mut size) };
        if size == 0 {
            return Err(last_error("InitializeProcThreadAttributeList(size)"));
        }
        let words = size.div_ceil(std::mem::size_of::<usize>());
        let mut buf = vec![0usize; words];
        let handles = Box::new(handles);
        let list: LPPROC_THREAD_ATTRIBUTE_LIST = buf.as_mut_ptr().cast();
        // SAFETY: `buf` holds at least `size` bytes, aligned for the list, and lives in
        // `Self` until after DeleteProcThreadAttributeList.
        let ok = unsafe { InitializeProcThreadAttributeList(list, 1, 0, &mut size) };
        if ok == 0 {
            return Err(last_error("InitializeProcThreadAttributeList"));
        }
        let this = Self {
            buf,
            _handles: handles,
        };
        // SAFETY: the list was initialised for one attribute; the value points to the
        // boxed array of three handles, which lives as long as the list (`Self`).
        let ok = unsafe {
            UpdateProcThreadAttribute(
                this.list(),
                0,
                PROC_THREAD_ATTRIBUTE_HANDLE_LIST as usize,
                this._handles.as_ptr().cast::<c_void>(),
                std::mem::size_of::<[HANDLE; 3]>(),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ok == 0 {
            return Err(last_error(
                "UpdateProcThreadAttribute(PROC_THREAD_ATTRIBUTE_HANDLE_LIST)",
            ));
        }
        Ok(this)
    }

    fn list(&self) -> LPPROC_THREAD_ATTRIBUTE_LIST {
        self.buf.as_ptr().cast_mut().cast()
    }
}

impl Drop for HandleList {
    fn drop(&mut self) {
        // SAFETY: the list was initialised in `new` and is deleted once, here.
        unsafe { DeleteProcThreadAttributeList(self.list()) };
    }
}

/// Starts `plan` in a new Job Object (see the module documentation for the order).
pub fn launch(plan: &Plan) -> Result<WindowsLaunched, WindowsLaunchError> {
    let missing_layers = check_layers(plan)?;
    let cpus = std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1);
    let limits = job_limits(plan, cpus);
    let job = JobObject::create(&limits)?;

    let program = plan
        .program
        .to_str()
        .ok_or(CommandLineError::Nul { index: 0 })?;
    let mut argv: Vec<&str> = vec![program];
    argv.extend(plan.argv.iter().skip(1).map(String::as_str));
    let mut cmdline =
        wide(OsStr::new(&command_line(&argv)?)).ok_or(CommandLineError::Nul { index: 0 })?;
    let env = environment_block(&plan.env)?;
    let app = wide(plan.program.as_os_str()).ok_or(CommandLineError::Nul { index: 0 })?;
    let cwd = wide(plan.cwd.as_os_str()).ok_or(CommandLineError::Nul { index: 0 })?;

    let stdin = pipe(true)?;
    let stdout = pipe(false)?;
    let stderr = pipe(false)?;
    let handles = [
        stdin.child.as_raw_handle(),
        stdout.child.as_raw_handle(),
        stderr.child.as_raw_handle(),
    ];
    let list = HandleList::new(handles)?;
    let mut si = STARTUPINFOEXW::default();
    si.StartupInfo.cb = u32::try_from(std::mem::size_of::<STARTUPINFOEXW>()).unwrap_or(0);
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = handles[0];
    si.StartupInfo.hStdOutput = handles[1];
    si.StartupInfo.hStdError = handles[2];
    si.lpAttributeList = list.list();
    let mut pi = PROCESS_INFORMATION::default();
    let creation = CREATE_SUSPENDED
        | CREATE_NEW_PROCESS_GROUP
        | CREATE_UNICODE_ENVIRONMENT
        | EXTENDED_STARTUPINFO_PRESENT;
    // SAFETY: every string is NUL-terminated UTF-16 that outlives the call; `cmdline` is
    // mutable as CreateProcessW requires; `env` is a complete block (double NUL);
    // `si` is a STARTUPINFOEXW whose `cb` says so (EXTENDED_STARTUPINFO_PRESENT) and
    // whose attribute list limits inheritance to the three stdio handles; `pi` is a
    // live out-structure.
    let ok = unsafe {
        CreateProcessW(
            app.as_ptr(),
            cmdline.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            1,
            creation,
            env.as_ptr().cast(),
            cwd.as_ptr(),
            &si.StartupInfo,
            &mut pi,
        )
    };
    drop(list);
    if ok == 0 {
        return Err(last_error("CreateProcessW"));
    }
    // SAFETY: CreateProcessW succeeded: both handles are fresh and ours.
    let (process, thread) = unsafe {
        (
            OwnedHandle::from_raw_handle(pi.hProcess),
            OwnedHandle::from_raw_handle(pi.hThread),
        )
    };
    // The child has its copies; close ours so EOF reaches each side.
    drop((stdin.child, stdout.child, stderr.child));
    if let Err(e) = job.assign(&process) {
        // SAFETY: valid process handle; it never ran (suspended).
        unsafe { TerminateProcess(process.as_raw_handle(), KILLED_EXIT_CODE) };
        return Err(e);
    }
    // SAFETY: valid thread handle of the suspended main thread.
    let resumed = unsafe { ResumeThread(thread.as_raw_handle()) };
    if resumed == u32::MAX {
        let e = last_error("ResumeThread");
        let _ = job.terminate(KILLED_EXIT_CODE);
        return Err(e);
    }
    drop(thread);
    let stdin_w = File::from(stdin.parent);
    Ok(WindowsLaunched {
        job,
        process,
        pid: pi.dwProcessId,
        stdin: plan.stdin.as_ref().map(|_| stdin_w),
        stdout: File::from(stdout.parent),
        stderr: File::from(stderr.parent),
        limits,
        missing_layers,
    })
}
