/* The recorder's last look before a rank dies of SIGABRT.
 *
 * A C++ exception nobody catches ends in std::terminate, then abort(): gloo's
 * "Received data size doesn't match expected size", a watchdog's rethrow, any fatal
 * check. abort() raises SIGABRT in the failing thread, usually one of the backend's own,
 * and no Python code runs before the process is gone: whatever torch's Flight Recorder
 * held that the recorder had not copied yet would be lost, often the very collectives
 * that explain the failure.
 *
 * Python cannot handle SIGABRT itself (its handlers run later, on the main thread, and
 * abort() does not return), so this handler, in the aborting thread, takes the GIL and
 * calls the recorder's callback, then lets the signal's default action end the process
 * as it would have. An alarm bounds the whole: if the GIL or the callback does not come
 * back in time, the alarm's handler ends the process by SIGABRT regardless, so a dying
 * rank can be delayed, never kept alive.
 *
 * Only installed where SIGABRT has its default action: a handler someone else installed
 * (faulthandler's) is left alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

static PyObject *callback = NULL;
static unsigned int limit_s = 10;
static volatile sig_atomic_t entered = 0;
static int installed = 0;

static void die_by_abort(void) {
    signal(SIGABRT, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGABRT);
    /* blocked while its handler runs: unblocked, the raise acts at once */
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(SIGABRT);
    kill(getpid(), SIGABRT); /* should this thread not receive it */
    _exit(128 + SIGABRT);
}

static void on_alarm(int sig) {
    (void)sig;
    die_by_abort();
}

static int finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

static void on_abort(int sig) {
    (void)sig;
    if (entered || callback == NULL || !Py_IsInitialized() || finalizing()) die_by_abort();
    entered = 1;
    struct sigaction alarm_action;
    memset(&alarm_action, 0, sizeof(alarm_action));
    alarm_action.sa_handler = on_alarm;
    sigemptyset(&alarm_action.sa_mask);
    sigaction(SIGALRM, &alarm_action, NULL);
    alarm(limit_s);
    PyGILState_STATE state = PyGILState_Ensure();
    PyObject *result = PyObject_CallNoArgs(callback);
    if (result == NULL)
        PyErr_Clear(); /* the process is ending: nobody is left to report it to */
    Py_XDECREF(result);
    PyGILState_Release(state);
    die_by_abort();
}

static PyObject *install(PyObject *module, PyObject *args) {
    PyObject *function;
    unsigned int seconds;
    if (!PyArg_ParseTuple(args, "OI:install", &function, &seconds)) return NULL;
    if (!PyCallable_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "install() needs a callable");
        return NULL;
    }
    struct sigaction current;
    if (sigaction(SIGABRT, NULL, &current) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    if (!installed && current.sa_handler != SIG_DFL) Py_RETURN_FALSE;
    Py_INCREF(function);
    Py_XSETREF(callback, function);
    limit_s = seconds ? seconds : 1;
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_abort;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGABRT, &action, NULL) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    installed = 1;
    Py_RETURN_TRUE;
}

static PyObject *uninstall(PyObject *module, PyObject *unused) {
    if (installed) {
        signal(SIGABRT, SIG_DFL);
        installed = 0;
    }
    Py_CLEAR(callback);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(callback, limit_s) -> bool: call callback() in the aborting thread, with the "
     "GIL, before SIGABRT ends the process; the process ends within limit_s whatever "
     "happens. False where SIGABRT already has someone else's handler."},
    {"uninstall", uninstall, METH_NOARGS, "Give SIGABRT back its default action."},
    {NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fr_otel.recorder._lastgasp",
    .m_doc = "The recorder's callback before SIGABRT ends the process.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__lastgasp(void) { return PyModule_Create(&module); }
